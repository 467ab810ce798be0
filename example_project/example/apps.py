"""The example app."""

from __future__ import annotations

from django.apps import AppConfig


class ExampleConfig(AppConfig):
    name = "example"
    default_auto_field = "django.db.models.AutoField"

"""App config of the fencing scenario's resource."""

from __future__ import annotations

from django.apps import AppConfig


class FencingConfig(AppConfig):
    name = "tests.chaos.fencing"
    label = "chaos_fencing"

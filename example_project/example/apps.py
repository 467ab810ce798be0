"""The example app: logs force releases and lost holds for the demo's summary (signals)."""

from __future__ import annotations

from django.apps import AppConfig


class ExampleConfig(AppConfig):
    name = "example"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from django_redis_locks.signals import hold_force_released, hold_lost

        from .holds import record_force_release, record_lost

        hold_force_released.connect(record_force_release)
        hold_lost.connect(record_lost)

"""The Django app: registers the system checks and the settings-change hook."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core.signals import setting_changed


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in ("DJANGO_REDIS_LOCKS", "CACHES"):
        from .conf import reset

        reset()


class DjangoRedisLocksConfig(AppConfig):
    name = "django_redis_locks"
    label = "django_redis_locks"
    verbose_name = "Redis locks"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from . import checks, signals  # noqa: F401  (the system checks register on import)

        signals.connect()

        setting_changed.connect(_on_setting_changed, dispatch_uid="django_redis_locks.settings")

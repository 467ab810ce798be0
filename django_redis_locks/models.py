"""An unmanaged model with no table: it gives the admin page an index entry and permissions.

Live locks and semaphore holders are read from Redis, never stored in the database. The
model exists so that Django creates its content type and permissions:

- ``django_redis_locks.view_livelock``: see the admin page of live locks and semaphores;
- ``django_redis_locks.force_release_livelock``: force-release a hold from it.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import models


class LiveLock(models.Model):
    """A placeholder for the admin; it has no rows (``managed = False``, no table)."""

    class Meta:
        managed = False
        default_permissions = ("view",)
        permissions: ClassVar = [
            ("force_release_livelock", "Can force-release lock and semaphore holds")
        ]
        verbose_name = "live lock"
        verbose_name_plural = "live locks and semaphores"

    def __str__(self) -> str:
        return "live locks and semaphores"

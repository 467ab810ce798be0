"""A task of Django's task framework under ``@redis_lock``: one rebuild per index at a time.

``@task()`` goes on top, so the lock wraps the function that the worker runs. A call that
finds the index being rebuilt already is skipped (it returns None) instead of waiting.
"""

from __future__ import annotations

import random
import time

from django_redis_locks import redis_lock

from .holds import record_hold

try:
    from django.tasks import TaskResultStatus, task
except ImportError:  # Django < 6.0: the django-tasks backport
    from django_tasks import TaskResultStatus, task  # type: ignore[no-redef,assignment]

__all__ = ["TaskResultStatus", "rebuild_index"]


@task()
@redis_lock("rebuild:{index}", timeout=10, on_contention="skip")
def rebuild_index(index: str) -> str | None:  # None: skipped by @redis_lock
    """Rebuild a search index (a short sleep here); skipped while another call rebuilds it."""
    with record_hold("lock", f"rebuild:{index}", by="task"):
        time.sleep(random.uniform(0.2, 0.5))
    return f"rebuilt {index}"

"""A unique task of Django's task framework: one rebuild per index queued or running.

``@unique_task`` goes above ``@task()``: the enqueue takes the index's name and the run that
the worker (here the ImmediateBackend, in the enqueuing process) makes holds it until it
ends. An enqueue that finds the index queued or being rebuilt already is skipped (it returns
None: the demo's backend keeps no results) instead of queueing a duplicate.
"""

from __future__ import annotations

import random
import time

from django_redis_locks import unique_task

from .holds import record_hold

try:
    from django.tasks import TaskResultStatus, task
except ImportError:  # Django < 6.0: the django-tasks backport
    from django_tasks import TaskResultStatus, task  # type: ignore[no-redef,assignment]

__all__ = ["TaskResultStatus", "rebuild_index"]


@unique_task("rebuild:{index}", mode="until_executed", timeout=10, on_conflict="skip")
@task()
def rebuild_index(index: str) -> str:
    """Rebuild a search index (a short sleep here)."""
    with record_hold("lock", f"rebuild:{index}", by="task"):
        time.sleep(random.uniform(0.2, 0.5))
    return f"rebuilt {index}"

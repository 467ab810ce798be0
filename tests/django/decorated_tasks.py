"""Tasks under @redis_lock for the decorator tests: Django's task framework and Celery.

Django's ``@task`` (``django.tasks`` from Django 6.0, the ``django-tasks`` backport before)
and Celery's ``@shared_task`` go above ``@redis_lock``, so the lock wraps the function that
the worker runs.
"""

from __future__ import annotations

from typing import Any

from celery import Celery, shared_task

from django_redis_locks import redis_lock
from django_redis_locks.decorators import SKIPPED
from django_redis_locks.inspection import get_lock

try:
    from django.tasks import TaskContext, task
except ImportError:  # Django < 6.0
    from django_tasks import TaskContext, task  # type: ignore[no-redef,assignment]

__all__ = ["TaskContext", "celery_app", "runs"]

runs: list[str] = []

celery_app = Celery("tests", set_as_current=True)
celery_app.conf.update(task_always_eager=True, task_eager_propagates=True)


@task()
@redis_lock("rebuild:{index}", timeout=10, on_contention="skip")
def rebuild(index: str) -> str:
    runs.append(f"rebuild {index}")
    return f"rebuilt {index}"


@task()
@redis_lock("strict:{index}", timeout=10)
def rebuild_or_fail(index: str) -> str:
    runs.append(f"strict {index}")
    return f"rebuilt {index}"


@shared_task
@redis_lock("celery:{index}", timeout=10, on_contention="skip")
def celery_rebuild(index: str) -> str:
    runs.append(f"celery {index}")
    return f"rebuilt {index}"


@shared_task(bind=True)
@redis_lock("celery-bound:{index}", timeout=10)
def celery_bound(self: Any, index: str) -> str:
    runs.append(f"celery-bound {index} {self.name}")
    return f"rebuilt {index}"


@task(takes_context=True, backend="deferred")
@redis_lock("report:{day}", timeout=10, on_contention="retry", skip_result=SKIPPED)
def daily_report(context: Any, day: str) -> str:  # a TaskContext
    runs.append(f"report {day} attempt {context.attempt}")
    return f"report {day}"


@shared_task(bind=True, max_retries=3)
@redis_lock("celery-retry:{index}", timeout=10, on_contention="retry")
def celery_retrying(self: Any, index: str) -> str:
    runs.append(f"celery-retry {index}")
    return f"rebuilt {index}"


@shared_task(bind=True)
@redis_lock("celery-seen:{index}", timeout=10)
def celery_seen(self: Any, index: str) -> dict[str, Any]:
    """The holder metadata of its own hold, as a listing shows it."""
    return _own_metadata(f"celery-seen:{index}")


@task(takes_context=True)
@redis_lock("django-seen:{index}", timeout=10)
def django_seen(context: Any, index: str) -> dict[str, Any]:
    """The holder metadata of its own hold, as a listing shows it."""
    return _own_metadata(f"django-seen:{index}")


def _own_metadata(name: str) -> dict[str, Any]:
    hold = get_lock(name)
    assert hold is not None
    return hold.metadata

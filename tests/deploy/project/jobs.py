"""Tasks of Django's task framework under ``@redis_lock``, run by ``db_worker`` processes
(django-tasks-db's database backend): ``@task()`` on top, so the lock wraps what the worker
runs. ``django.tasks`` from Django 6.0, the django-tasks backport before."""

from __future__ import annotations

import os
from typing import Any

from django_redis_locks import SKIPPED, redis_lock
from tests.deploy.project import section
from tests.deploy.project.section import ATTEMPT_TTL, LOCKED_TTL, LOCKED_WAIT, RENEWED_TTL

try:
    from django.tasks import task
except ImportError:  # Django < 6.0
    from django_tasks import task  # type: ignore[no-redef]


@task()
def ping() -> int:
    return os.getpid()


@task()
@redis_lock("{name}", timeout=LOCKED_TTL, blocking=True, blocking_timeout=LOCKED_WAIT)
def locked(name: str, seconds: float) -> dict[str, Any]:
    return section.run(name, seconds, "locked")


@task()
def bare(name: str, seconds: float) -> dict[str, Any]:
    return section.run(name, seconds, "bare")


@task()
@redis_lock("{name}", timeout=ATTEMPT_TTL, on_contention="skip", skip_result=SKIPPED)
def attempt(name: str, seconds: float) -> dict[str, Any]:
    return section.run(name, seconds, "attempt")


@task()
@redis_lock("{name}", timeout=RENEWED_TTL, on_contention="skip", skip_result=SKIPPED)
def renewed(name: str, seconds: float) -> dict[str, Any]:
    return section.run(name, seconds, "renewed")


TASKS: dict[str, Any] = {  # by name, for the task client
    "ping": ping,
    "locked": locked,
    "bare": bare,
    "attempt": attempt,
    "renewed": renewed,
}

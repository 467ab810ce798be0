"""Unique tasks of Django's task framework (``@unique_task`` above ``@task()``), run by the
``db_worker`` processes: the worker imports them by module path, so it runs them the unique
way (taking over the hold their enqueue handed off). Each run is the critical section of
:mod:`tests.deploy.project.section`; the name is the ``name`` argument, prefixed.

The holds are short (``section.UNIQUE_TTL``), so that a SIGKILLed worker frees its task's
name soon.
"""

from __future__ import annotations

from typing import Any

from django_redis_locks import unique_task
from tests.deploy.project import section
from tests.deploy.project.section import UNIQUE_QUEUED_TTL, UNIQUE_TTL

try:
    from django.tasks import task
except ImportError:  # Django < 6.0
    from django_tasks import task  # type: ignore[no-redef]


@unique_task(
    "unique:{name}", mode="until_executed", timeout=UNIQUE_TTL, queued_timeout=UNIQUE_QUEUED_TTL
)
@task()
def unique(name: str, seconds: float) -> dict[str, Any]:
    """Queued or running once at most per ``name``: from its enqueue to the end of its run."""
    return section.run(name, seconds, "unique")


@unique_task(
    "starting:{name}",
    mode="until_executing",
    timeout=UNIQUE_TTL,
    queued_timeout=UNIQUE_QUEUED_TTL,
)
@task()
def starting(name: str, seconds: float) -> dict[str, Any]:
    """Queued once at most per ``name``: the name is given back when a worker starts it."""
    return section.run(name, seconds, "starting")


TASKS: dict[str, Any] = {"unique": unique, "starting": starting}  # for the task client

"""The Celery application of the project (``celery -A tests.deploy.project.celery_app``) and
its tasks: under ``@redis_lock`` (``@app.task`` on top, so the lock wraps what the worker
runs), and unique tasks (``base=UniqueTask``) with a short running hold
(``section.UNIQUE_TTL``), so that a killed worker frees its task's name soon.

Broker and result backend come from the Django settings (``CELERY_*``); the tasks go to the
queue named after the test's namespace.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from django_redis_locks import SKIPPED, redis_lock
from django_redis_locks.unique.celery_tasks import UniqueTask
from tests.deploy.project import section
from tests.deploy.project.section import (
    ATTEMPT_TTL,
    HARD_TIME_LIMIT,
    LOCKED_TTL,
    LOCKED_WAIT,
    RENEWED_TTL,
    UNIQUE_QUEUED_TTL,
    UNIQUE_TTL,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.deploy.project.settings")

app = Celery("deploy")
app.config_from_object("django.conf:settings", namespace="CELERY")


@app.task(name="deploy.ping")
def ping() -> int:
    return os.getpid()


@app.task(name="deploy.locked")
@redis_lock("{name}", timeout=LOCKED_TTL, blocking=True, blocking_timeout=LOCKED_WAIT)
def locked(name: str, seconds: float) -> dict[str, Any]:
    return section.run(name, seconds, "locked")


@app.task(name="deploy.bare")
def bare(name: str, seconds: float) -> dict[str, Any]:
    return section.run(name, seconds, "bare")


@app.task(name="deploy.attempt")
@redis_lock("{name}", timeout=ATTEMPT_TTL, on_contention="skip", skip_result=SKIPPED)
def attempt(name: str, seconds: float) -> dict[str, Any]:
    return section.run(name, seconds, "attempt")


@app.task(name="deploy.renewed")
@redis_lock("{name}", timeout=RENEWED_TTL, on_contention="skip", skip_result=SKIPPED)
def renewed(name: str, seconds: float) -> dict[str, Any]:
    return section.run(name, seconds, "renewed")


# -- unique tasks (base=UniqueTask): the name taken at enqueue, handed to the worker ---------
_UNIQUE = {"mode": "until_executed", "timeout": UNIQUE_TTL, "queued_timeout": UNIQUE_QUEUED_TTL}


@app.task(name="deploy.unique", base=UniqueTask, unique={"key": "unique:{name}", **_UNIQUE})
def unique(name: str, seconds: float) -> dict[str, Any]:
    """Queued or running once at most per ``name``, from its enqueue to the end of its run."""
    return section.run(name, seconds, "unique")


@app.task(
    name="deploy.limited",
    base=UniqueTask,
    unique={"key": "limited:{name}", **_UNIQUE},
    time_limit=HARD_TIME_LIMIT,
)
def limited(name: str, seconds: float) -> dict[str, Any]:
    """Killed by the pool at its hard time limit when ``seconds`` is longer."""
    return section.run(name, seconds, "limited")


@app.task(
    name="deploy.retried",
    bind=True,
    base=UniqueTask,
    unique={"key": "retried:{name}", **_UNIQUE},
    max_retries=1,
)
def retried(self: Any, name: str, seconds: float) -> dict[str, Any]:
    """Retries once ``seconds`` later (its first run records an instant section), then
    runs."""
    if self.request.retries == 0:
        section.run(name, 0, "retried-first")
        raise self.retry(countdown=seconds)
    return section.run(name, 0, "retried")


@app.task(
    name="deploy.redelivered",
    base=UniqueTask,
    unique={"key": "redelivered:{name}", **_UNIQUE},
    acks_late=True,
    reject_on_worker_lost=True,
)
def redelivered(name: str, seconds: float) -> dict[str, Any]:
    """Acknowledged when it ends: a worker lost meanwhile has the broker deliver it again."""
    return section.run(name, seconds, "redelivered")


@app.task(
    name="deploy.refreshed",
    base=UniqueTask,
    unique={"key": "refreshed:{name}", "on_conflict": "reschedule", **_UNIQUE},
)
def refreshed(name: str, seconds: float) -> dict[str, Any]:
    """Enqueued again while it runs: runs once more after (on_conflict="reschedule")."""
    return section.run(name, seconds, "refreshed")

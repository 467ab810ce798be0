"""The Celery application of the project (``celery -A tests.deploy.project.celery_app``) and
its tasks under ``@redis_lock``: ``@app.task`` on top, so the lock wraps what the worker runs.

Broker and result backend come from the Django settings (``CELERY_*``); the tasks go to the
queue named after the test's namespace.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from django_redis_locks import SKIPPED, redis_lock
from tests.deploy.project import section
from tests.deploy.project.section import ATTEMPT_TTL, LOCKED_TTL, LOCKED_WAIT, RENEWED_TTL

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

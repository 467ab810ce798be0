"""The critical section every decorated function of the project runs: it lasts ``seconds``
and then appends one JSON line ``{"name", "kind", "start", "end", "pid", "worker"}`` to
``$DRL_DEPLOY_LOG``.

``start`` and ``end`` are ``time.monotonic()``: CLOCK_MONOTONIC is one clock for every process
of a Linux machine, so intervals written by different processes compare. Each line is one
``write()`` on a file opened with O_APPEND, so lines of concurrent writers never mix.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from typing import Any

Record = dict[str, Any]

#: The decorated functions' lock options, by kind (the same for views and tasks):
#: "locked" waits for the lock; "attempt" and "renewed" give up at once (a view answers 409, a
#: task returns SKIPPED); "bare" takes no lock (the control: its runs do overlap).
LOCKED_TTL = 5.0
LOCKED_WAIT = 30.0  # blocking_timeout of "locked"
ATTEMPT_TTL = 3.0  # the TTL a SIGKILLed holder keeps the name for, at most
RENEWED_TTL = 1.0  # shorter than the runs that hold it: only renewal keeps it
#: The unique tasks' holds (tests.deploy.project.unique_jobs): while one runs (renewed), and
#: while it is queued (not renewed).
UNIQUE_TTL = 2.0  # a SIGKILLed worker frees its task's name within it, at most
UNIQUE_QUEUED_TTL = 30.0
HARD_TIME_LIMIT = 1.0  # Celery's time_limit of the unique task that overruns it


def _append(record: Record) -> None:
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(os.environ["DRL_DEPLOY_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _record(name: str, kind: str, start: float, end: float) -> Record:
    record: Record = {
        "name": name,
        "kind": kind,
        "start": start,
        "end": end,
        "pid": os.getpid(),
        "worker": os.environ.get("DRL_DEPLOY_WORKER", "?"),
        "thread": threading.current_thread().name,
    }
    _append(record)
    return record


def run(name: str, seconds: float, kind: str) -> Record:
    """The section of a sync function (``time.sleep`` yields under gevent's patch)."""
    start = time.monotonic()
    time.sleep(seconds)
    return _record(name, kind, start, time.monotonic())


async def arun(name: str, seconds: float, kind: str) -> Record:
    """The section of an async function: it awaits, so other requests run meanwhile."""
    start = time.monotonic()
    await asyncio.sleep(seconds)
    return _record(name, kind, start, time.monotonic())

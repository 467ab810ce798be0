"""The records of a unique task's name in Redis: its ticket record (its format:
``core.protocol.tickets``) and the rerun asked of its running task (``KeySpace.rerun``); and
the task a worker runs now (Django's ``task_started`` signal)."""

from __future__ import annotations

import contextvars
import importlib
from typing import Any

from django_redis_locks.core.connection.backend import Backend
from django_redis_locks.core.errors import InvalidArgument
from django_redis_locks.core.info import HolderInfo
from django_redis_locks.core.protocol import tickets
from django_redis_locks.core.protocol.holder import holder_id
from django_redis_locks.core.protocol.scripting import Call, load
from django_redis_locks.core.runtime.driver import Command, Eval, Operation, drive
from django_redis_locks.core.validation import to_millis

__all__ = [
    "ask_rerun",
    "delete",
    "finish",
    "finished",
    "name_task",
    "queued_task_id",
    "read",
    "running_task_result",
    "take_rerun",
    "watch_workers",
    "write",
]

#: The TaskResult of the Django task this thread's worker runs now (set by task_started).
_running: contextvars.ContextVar[Any] = contextvars.ContextVar("drl_running_task", default=None)


def write(backend: Backend, name: str, ticket: str, ttl: float, task_id: str | None = None) -> None:
    """Record ``ticket`` for lock ``name``'s next worker (the task ``task_id``, if known),
    for ``ttl`` seconds (the hold's)."""
    key = backend.keys.ticket(name)
    _command(backend, key, "SET", key, tickets.encode_record(task_id, ticket), "PX", to_millis(ttl))


def name_task(backend: Backend, name: str, ticket: str, task_id: str) -> bool:
    """Add the enqueued task's id to the record, if it is still the one :func:`write` wrote
    for ``ticket`` (not if a worker took the hold over, nor a newer enqueue's record, which
    stays): whether it did."""
    key = backend.keys.ticket(name)
    args = (tickets.encode_record(None, ticket), tickets.encode_record(task_id, ticket))

    def operation() -> Operation[bool]:
        return bool((yield Eval(Call(load("ticket_name"), (key,), args))))

    return drive(operation(), backend)


def read(backend: Backend, name: str) -> tuple[str | None, str] | None:
    """(task id or None, ticket) recorded for ``name``, or None."""
    key = backend.keys.ticket(name)
    return tickets.decode_record(_command(backend, key, "GET", key))


def finish(backend: Backend, name: str, task_id: str, ttl: float) -> None:
    """Record that task ``task_id``'s run under lock ``name`` has ended, for ``ttl``
    seconds."""
    key = backend.keys.ticket(name)
    value = tickets.encode_record(task_id, tickets.FINISHED)
    _command(backend, key, "SET", key, value, "PX", to_millis(ttl))


def finished(backend: Backend, name: str, task_id: str) -> bool:
    """Whether a run of task ``task_id`` under lock ``name`` has ended lately."""
    return read(backend, name) == (task_id, tickets.FINISHED)


def queued_task_id(backend: Backend, hold: HolderInfo) -> str | None:
    """The id of the task a queued hold was handed to, from its ticket record (the hold was
    taken before the task had an id, so its metadata cannot say); None if not recorded (yet),
    or if the record is another hold's."""
    record = read(backend, hold.name)
    if record is None or record[0] is None:
        return None
    try:
        _, token = tickets.parse_ticket(record[1])
    except InvalidArgument:  # (FINISHED, or garbage)
        return None
    return record[0] if holder_id(token) == hold.holder_id else None


def delete(backend: Backend, name: str) -> None:
    key = backend.keys.ticket(name)
    _command(backend, key, "DEL", key)


def ask_rerun(backend: Backend, name: str, ttl: float) -> None:
    """Ask the task that runs under lock ``name`` to be enqueued once more when its run ends
    (for ``ttl`` seconds at most)."""
    key = backend.keys.rerun(name)
    _command(backend, key, "SET", key, "1", "PX", to_millis(ttl))


def take_rerun(backend: Backend, name: str) -> bool:
    """Take the rerun asked for lock ``name``, if any: whoever takes it enqueues it."""
    key = backend.keys.rerun(name)
    return _command(backend, key, "GETDEL", key) is not None


def _command(backend: Backend, key: str, *args: Any) -> Any:
    """One plain command on the node serving ``key``; LockBackendError when Redis fails."""

    def operation() -> Operation[Any]:
        return (yield Command(args, key))

    return drive(operation(), backend)


def running_task_result() -> Any:
    """The TaskResult of the task this worker thread runs, or None."""
    return _running.get()


def _started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _running.set(task_result)


def _finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _running.set(None)


def watch_workers() -> None:
    """Follow the tasks workers start and finish (Django 6.0+'s ``django.tasks``, and the
    django-tasks backport), once per process; safe to call again."""
    for module in ("django.tasks.signals", "django_tasks.signals"):
        try:
            signals = importlib.import_module(module)
        except ImportError:
            continue
        signals.task_started.connect(_started, dispatch_uid=f"drl-started-{module}")
        signals.task_finished.connect(_finished, dispatch_uid=f"drl-finished-{module}")

"""``@unique_task``: a task with these arguments queued or running once at most."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings

from django_redis_locks.core.errors import InvalidArgument, InvalidArgumentType
from django_redis_locks.core.validation import check_ttl
from django_redis_locks.decorators.callers import is_django_task, label_of
from django_redis_locks.decorators.names import Namer, signatures_of
from django_redis_locks.transactions import check_database

from .django_tasks import make_unique
from .records import watch_workers
from .spec import MODES, Mode, OnConflict, OnContention, Uniqueness

__all__ = ["DEFAULT_QUEUED_TIMEOUT", "check_options", "unique_task"]

#: How long a queued task keeps its name by default (seconds): a task no worker starts
#: within it no longer blocks the next enqueue.
DEFAULT_QUEUED_TIMEOUT = 3600.0


def unique_task(
    key: str | Any,
    *,
    mode: Mode = "until_executed",
    timeout: float | None = None,
    queued_timeout: float = DEFAULT_QUEUED_TIMEOUT,
    on_conflict: OnConflict = "raise",
    on_contention: OnContention = "raise",
    skip_result: Any = None,
    using: str | None = None,
    database: str | None = None,
) -> Callable[[Any], Any]:
    """Make a Django task unique by its arguments; goes above ``@task()``::

        @unique_task("rebuild:{report_id}", mode="until_executed")
        @task()
        def rebuild(report_id): ...

    ``key`` names the lock as ``@redis_lock``'s does (a template of the function's
    parameters, or a callable). ``mode``: ``"until_executing"`` (the name is taken when the
    task is enqueued and given back when a worker starts it), ``"until_executed"`` (taken at
    enqueue, handed to the worker that runs the task, given back when it ends, succeeded or
    failed), ``"until_expired"`` (taken at enqueue, kept ``queued_timeout`` seconds whatever
    happens), ``"while_executing"`` (only while it runs, as ``@redis_lock``).
    ``queued_timeout`` bounds how long a queued task keeps its name (the hold is not renewed
    while queued: a task lost with its queue, or never started, frees the name then).
    ``timeout`` is the running task's hold, renewed while it runs (default: the
    ``DEFAULT_TIMEOUT`` setting): a worker killed mid-task frees the name within it.
    ``on_conflict``: what ``enqueue`` does when the name is taken: ``"raise"``
    (``AlreadyQueued``, with the existing ``task_id``), ``"skip"`` (return the existing
    task's TaskResult, None if unknown), or ``"reschedule"`` (return it too, and make sure
    the task runs after it: a queued task will; a running one enqueues its task once more
    when its run ends, however many enqueues asked meanwhile; modes ``until_executed`` and
    ``until_executing``). ``on_contention``: what a worker does when it cannot
    have the name (its queued hold ran out and another run has it): ``"raise"``
    (LockNotAcquired) or ``"skip"`` (return ``skip_result``). ``using``: the cache alias;
    ``database``: the transaction ``enqueue_on_commit`` follows (default ``"default"``).

    The task gains ``enqueue_on_commit(*args, **kwargs)`` and ``find(*args, **kwargs)``
    (the task queued or running with these arguments, or None).
    """
    options = check_options(
        key,
        mode=mode,
        timeout=timeout,
        queued_timeout=queued_timeout,
        on_conflict=on_conflict,
        on_contention=on_contention,
        skip_result=skip_result,
        using=using,
        database=database,
    )

    def decorate(task: Any) -> Any:
        if not is_django_task(task):
            raise InvalidArgumentType(
                "task",
                f"@unique_task makes a Django task unique: put it above @task(), not on {task!r}",
            )
        spec = Uniqueness(
            namer=Namer(key, signatures_of(task.func), label_of(task.func)), **options
        )
        watch_workers()
        return make_unique(task, spec)

    return decorate


def check_options(key: Any, **options: Any) -> dict[str, Any]:
    """The options of a unique task, checked (InvalidArgument / InvalidArgumentType), as
    :class:`.spec.Uniqueness` takes them (all but the namer)."""
    if not (isinstance(key, str) and key) and not callable(key):
        raise InvalidArgumentType(
            "key", f"must be a non-empty str template or a callable, not {key!r}"
        )
    unknown = set(options) - set(_DEFAULTS)
    if unknown:
        raise InvalidArgument("unique", f"unknown options: {', '.join(sorted(unknown))}")
    values = {**_DEFAULTS, **options}
    mode, on_conflict = values["mode"], values["on_conflict"]
    if mode not in MODES:
        raise InvalidArgument("mode", f"must be one of {', '.join(map(repr, MODES))}, not {mode!r}")
    if on_conflict not in ("raise", "skip", "reschedule"):
        raise InvalidArgument(
            "on_conflict", f"must be 'raise', 'skip' or 'reschedule', not {on_conflict!r}"
        )
    for option, modes in _USED_IN.items():
        if mode not in modes and values[option] != _DEFAULTS[option]:
            raise InvalidArgument(option, f"has no effect in mode {mode!r}")
    if mode == "while_executing" and on_conflict != "raise":
        raise InvalidArgument(
            "on_conflict",
            f"{on_conflict!r} has no effect in mode 'while_executing': nothing is taken at "
            "enqueue (on_contention says what a run that finds the name taken does)",
        )
    if on_conflict == "reschedule" and mode not in ("until_executed", "until_executing"):
        raise InvalidArgument(
            "on_conflict",
            f"'reschedule' needs mode 'until_executed' or 'until_executing', not {mode!r}",
        )
    if values["on_contention"] not in ("raise", "skip"):
        raise InvalidArgument(
            "on_contention", f"must be 'raise' or 'skip', not {values['on_contention']!r}"
        )
    if values["timeout"] is not None:
        values["timeout"] = check_ttl(values["timeout"], "timeout")
    values["queued_timeout"] = check_ttl(values["queued_timeout"], "queued_timeout")
    using = values["using"]
    if using is not None and not isinstance(using, str):
        raise InvalidArgumentType("using", f"must be a str or None, not {type(using).__name__}")
    values["database"] = check_database(values["database"], known=settings.configured)
    return values


_DEFAULTS: dict[str, Any] = {
    "mode": "until_executed",
    "timeout": None,
    "queued_timeout": DEFAULT_QUEUED_TIMEOUT,
    "on_conflict": "raise",
    "on_contention": "raise",
    "skip_result": None,
    "using": None,
    "database": None,
}

#: The options that only some modes use: given to another, they are refused.
_USED_IN: dict[str, tuple[str, ...]] = {
    "timeout": ("until_executed", "until_executing", "while_executing"),  # the running hold
    "queued_timeout": ("until_executed", "until_executing", "until_expired"),
    "on_contention": ("until_executed", "while_executing"),  # a run that finds the name taken
    "skip_result": ("until_executed", "while_executing"),
}

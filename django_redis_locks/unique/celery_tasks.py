"""Unique Celery tasks: ``base=UniqueTask`` and a ``unique`` option on the task decorator::

    from django_redis_locks.unique.celery_tasks import UniqueTask

    @shared_task(base=UniqueTask, unique={"key": "rebuild:{report_id}", "mode": "until_executed"})
    def rebuild(report_id): ...

``unique`` takes ``@unique_task``'s arguments (``key`` and the keyword ones). ``apply_async``
(and ``delay``) take the name and hand it to the message's task id; the worker's call
(``__call__``) takes it over. A task that retries (``self.retry()``) hands its running hold
to the retry's message (a queued hold again): the name stays taken across retries, until the
last run ends.

A broker may deliver a task again while a run of it holds the name: ``acks_late`` with
``reject_on_worker_lost`` after its worker was lost, or a Redis broker's visibility timeout
shorter than the run. That delivery waits for the name up to the running hold's TTL: a dead
run's hold expires by then (its renewal stopped) and the delivery runs the task; a live run
keeps it, or ends meanwhile (it records that it finished), and the delivery is ignored
(``celery.exceptions.Ignore``: the run it duplicates stores the outcome).
"""

from __future__ import annotations

import functools
import threading
from typing import Any, ClassVar

from celery import Task
from celery.exceptions import Ignore, Retry
from celery.result import AsyncResult
from celery.utils import uuid

from django_redis_locks.core.errors import InvalidArgument
from django_redis_locks.core.handoff import hand_off, take_over
from django_redis_locks.core.lock import Lock
from django_redis_locks.core.registry import get_lock
from django_redis_locks.decorators.callers import label_of
from django_redis_locks.decorators.names import Namer, signatures_of

from . import handing, records
from .decorator import check_options
from .handing import Existing, logger
from .spec import Uniqueness, is_queued

__all__ = ["UniqueTask"]

#: The holds of the tasks this thread runs now, by task id: a retry's apply_async (inside
#: the run) hands the running hold on to the retry's message ({task id: [lock, handed]}).
_running = threading.local()


class UniqueTask(Task):  # type: ignore[misc]
    """A Celery task class whose tasks are unique by their arguments (see the module)."""

    unique: ClassVar[dict[str, Any] | None] = None
    _uniqueness: ClassVar[Uniqueness | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        options = cls.__dict__.get("unique")
        if options is None:
            return
        if not isinstance(options, dict) or "key" not in options:
            raise TypeError(f"{cls.__name__}: unique must be a dict with a 'key'")
        options = dict(options)
        key = options.pop("key")
        if "database" in options:  # (enqueue_on_commit is Django's tasks')
            raise InvalidArgument("unique", "'database' applies to Django's tasks only")
        values = check_options(key, **options)
        run = cls.__dict__.get("run")
        if run is None:
            raise TypeError(f"{cls.__name__}: unique needs the task's function (run)")
        func = run.__func__ if isinstance(run, staticmethod) else functools.partial(run, None)
        target = run.__func__ if isinstance(run, staticmethod) else run
        cls._uniqueness = Uniqueness(
            namer=Namer(key, signatures_of(func), label_of(target)), **values
        )

    # -- the enqueuer ----------------------------------------------------------------------
    def apply_async(
        self, args: Any = None, kwargs: Any = None, task_id: str | None = None, **options: Any
    ) -> Any:
        """Take the name, then send; on conflict raise AlreadyQueued, or (``"skip"``,
        ``"reschedule"``) return the AsyncResult of the task already queued or running (None
        if its id is not known)."""
        spec = self._uniqueness
        send = super().apply_async
        if spec is None or spec.mode == "while_executing":
            return send(args, kwargs, task_id=task_id, **options)
        args, kwargs = tuple(args or ()), dict(kwargs or {})
        name = spec.name(args, kwargs)
        task_id = task_id or uuid()
        fields = {"celery_task": self.name, "celery_task_id": task_id}
        lock = spec.queued_lock(name, self.name, fields)

        def sent() -> Any:
            return send(args, kwargs, task_id=task_id, **options)

        if _requeued(lock, task_id):
            return handing.enqueue_holding(lock, spec, sent, task_id)
        return handing.enqueue(spec, lock, sent, self.name, AsyncResult, task_id=task_id)

    def find(self, *args: Any, **kwargs: Any) -> Existing | None:
        """The task with these arguments that is queued or running, or None."""
        spec = self._uniqueness
        if spec is None:
            return None
        return handing.existing(spec, spec.name(args, kwargs), AsyncResult)

    # -- the worker ------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        spec = self._uniqueness
        run = super().__call__
        if spec is None or spec.mode == "until_expired":
            return run(*args, **kwargs)
        task_id = self.request.id
        if task_id and task_id in getattr(_running, "holds", {}):
            return run(*args, **kwargs)  # an eager retry, run inside its first run
        fields = {"celery_task": self.name}
        if task_id:
            fields["celery_task_id"] = str(task_id)
        lock = spec.running_lock(spec.name(args, kwargs), fields)
        taken = spec.mode != "while_executing" and handing.take_queued(lock, task_id)

        def serve_rerun() -> None:  # (a rerun asked while this hold was there)
            handing.rerun_if_asked(spec, lock, lambda: self.apply_async(args, kwargs))

        if spec.mode == "until_executing":
            if taken:
                lock.release()
                serve_rerun()
            return run(*args, **kwargs)
        if not taken:
            if not (
                lock.acquire(blocking=False)
                or (task_id and _delivered_again(spec, lock, str(task_id)))
            ):
                return handing.contended(spec, lock, self.name)
            if task_id and records.finished(lock.backend, lock.name, str(task_id)):
                lock.release()
                serve_rerun()
                logger.info("run: %s delivered again after its run ended: ignored", task_id)
                raise Ignore()
        return _run_holding(lock, str(task_id or ""), lambda: run(*args, **kwargs), serve_rerun)


def _requeued(queued: Lock, task_id: str) -> bool:
    """A retry of the task this thread runs: its running hold (if on this name) becomes the
    retry's queued hold (``queued``). Whether it did."""
    entry = getattr(_running, "holds", {}).get(task_id)
    if entry is None or entry[1] or entry[0].name != queued.name:
        return False
    entry[1] = True  # handed on, whatever comes next: the run does not release it
    return take_over(queued, hand_off(entry[0]))


#: How much longer than a run's hold TTL a second delivery waits for the name.
_GRACE = 1.0


def _delivered_again(spec: Uniqueness, lock: Lock, task_id: str) -> bool:
    """This task delivered while a run of the same task holds the name (see the module):
    True once this delivery has the name (the run ended or was lost: the caller tells
    which); Ignore if it still runs; False: the name is another task's."""
    holder = get_lock(lock.name, using=spec.using)
    if holder is None:  # freed meanwhile
        return lock.acquire(blocking=False)
    if holder.celery_task_id != task_id or is_queued(holder):
        return False
    wait = (holder.ttl or 0.0) + _GRACE  # (a renewal may add its TTL: then the run is alive)
    if not lock.acquire(blocking=True, timeout=wait):
        logger.info("run: %s delivered again while it runs: ignored", task_id)
        raise Ignore()
    logger.warning("run: %s delivered again while a run held its name: it has it now", task_id)
    return True


def _run_holding(lock: Lock, task_id: str, run: Any, after: Any) -> Any:
    """Run, then release, unless a retry took the hold with it; then ``after()``."""
    holds = _running.__dict__.setdefault("holds", {})
    entry = holds[task_id] = [lock, False]
    try:
        result = run()
    except Retry:
        if not entry[1]:
            handing.release_quietly(lock)
        raise
    except BaseException:
        _finish(lock, task_id)
        handing.release_quietly(lock)
        after()
        raise
    finally:
        holds.pop(task_id, None)
    _finish(lock, task_id)
    lock.release()
    after()
    return result


def _finish(lock: Lock, task_id: str) -> None:
    """Record that the run has ended (for a delivery of the same task waiting for it)."""
    if not task_id:
        return
    ttl = (lock.timeout or lock.backend.default_timeout) + 2 * _GRACE
    try:
        records.finish(lock.backend, lock.name, task_id, ttl)
    except Exception:
        logger.exception("finish: lock %r of task %s", lock.name, task_id)

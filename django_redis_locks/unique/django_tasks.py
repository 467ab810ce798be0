"""A Django task made unique: its enqueue takes the name, its worker takes the hold over.

The task object that ``@unique_task`` returns is the task ``@task()`` made, of a subclass
that adds ``uniqueness`` and overrides ``enqueue`` and ``call`` (what a worker runs), so
that the worker, importing the task by its module path, runs it the unique way too.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass, field, fields
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections

from django_redis_locks.core.errors import AlreadyQueued, LockLost
from django_redis_locks.core.lock import Lock
from django_redis_locks.transactions import in_transaction

from . import handing, records
from .handing import Existing
from .spec import Uniqueness

__all__ = ["Existing", "UniqueTaskMixin", "unique_class"]

logger = logging.getLogger("django_redis_locks.unique")


class UniqueTaskMixin:
    """The unique half of a task class (see :func:`unique_class`)."""

    uniqueness: Uniqueness
    takes_context: bool
    module_path: str

    # -- the enqueuer ----------------------------------------------------------------------
    def enqueue(self, *args: Any, **kwargs: Any) -> Any:
        """Take the name, then enqueue (see :func:`..unique_task`); on conflict raise
        AlreadyQueued, or (``on_conflict="skip"`` or ``"reschedule"``) return the existing
        task's TaskResult (None when its id or result is not known) without enqueueing."""
        spec = self.uniqueness
        send = super().enqueue  # type: ignore[misc]
        if spec.mode == "while_executing":
            return send(*args, **kwargs)
        lock = self._queued_lock(args, kwargs)
        return handing.enqueue(
            spec, lock, lambda: send(*args, **kwargs), self.module_path, self._handle
        )

    async def aenqueue(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`enqueue` from asyncio code (run in a worker thread: the hold is taken and
        handed off there)."""
        return await sync_to_async(self.enqueue, thread_sensitive=False)(*args, **kwargs)

    def enqueue_on_commit(self, *args: Any, **kwargs: Any) -> Any:
        """Take the name now, and enqueue when the transaction on the decorator's
        ``database`` commits; a rollback gives the name back. On conflict: as
        :meth:`enqueue`. Returns None (the task exists from the commit on), or the existing
        task's TaskResult (skipped); outside a transaction, what :meth:`enqueue` returns."""
        spec = self.uniqueness
        if spec.mode == "while_executing" or not in_transaction(spec.database):
            return self.enqueue(*args, **kwargs)
        lock = self._queued_lock(args, kwargs, renewed=True)
        if not lock.acquire(blocking=False):
            if spec.on_conflict == "reschedule":  # asked at the commit (not if rolled back)
                connections[spec.database].on_commit(
                    lambda: self.enqueue(*args, **kwargs), robust=True
                )
                return None
            return self._conflict(lock.name)

        def at_commit() -> None:
            finalizer.detach()
            try:
                try:
                    lock.extend(spec.queued_timeout, replace=True)
                except LockLost:  # (force-released meanwhile): take the name anew
                    self.enqueue(*args, **kwargs)
                else:
                    self._enqueue_holding(lock, args, kwargs)
            except AlreadyQueued as error:
                logger.info("enqueue: %s at commit skipped: %s", self.module_path, error)
            except Exception:
                logger.exception("enqueue: %s (lock %r) at commit failed", self, lock.name)

        def rolled_back() -> None:
            try:
                lock.release()
            except Exception:  # (a finalizer: nothing may escape it)
                logger.exception("release: lock %r of a task not enqueued", lock.name)

        finalizer = weakref.finalize(at_commit, rolled_back)
        finalizer.atexit = False
        try:
            connections[spec.database].on_commit(at_commit, robust=True)
        except BaseException:
            finalizer()
            raise
        return None

    def find(self, *args: Any, **kwargs: Any) -> Existing | None:
        """The task with these arguments that is queued or running (as :meth:`enqueue`
        would name it), or None: nothing is enqueued."""
        spec = self.uniqueness
        return handing.existing(
            spec, spec.name(args, kwargs, context=self.takes_context), self._handle
        )

    def _handle(self, task_id: str) -> Any:
        return self.get_result(task_id)  # type: ignore[attr-defined]

    def _queued_lock(self, args: Any, kwargs: Any, *, renewed: bool = False) -> Lock:
        spec = self.uniqueness
        name = spec.name(args, kwargs, context=self.takes_context)
        fields = {"django_task": self.module_path}
        return spec.queued_lock(name, self.module_path, fields, renewed=renewed)

    def _enqueue_holding(self, lock: Lock, args: Any, kwargs: Any) -> Any:
        send = super().enqueue  # type: ignore[misc]
        return handing.enqueue_holding(lock, self.uniqueness, lambda: send(*args, **kwargs))

    def _conflict(self, name: str) -> Any:
        found = handing.existing(self.uniqueness, name, self._handle)
        return handing.conflict(found, self.uniqueness, name, self.module_path)

    # -- the worker ------------------------------------------------------------------------
    def call(self, *args: Any, **kwargs: Any) -> Any:
        """Run the task the unique way (what a worker calls)."""
        spec = self.uniqueness
        if spec.mode == "until_expired":
            return super().call(*args, **kwargs)  # type: ignore[misc]
        passed = args[1:] if self.takes_context else args  # (a worker passes the context)
        name = spec.name(passed, kwargs, context=self.takes_context)
        task_id = _running_id(args, self.takes_context)
        fields = {"django_task": self.module_path}
        if task_id is not None:
            fields["django_task_id"] = task_id
        lock = spec.running_lock(name, fields)
        taken = spec.mode != "while_executing" and handing.take_queued(lock, task_id)

        def serve_rerun() -> None:  # (a rerun asked while this hold was there)
            handing.rerun_if_asked(spec, lock, lambda: self.enqueue(*passed, **kwargs))

        if spec.mode == "until_executing":
            if taken:
                lock.release()
                serve_rerun()
            return super().call(*args, **kwargs)  # type: ignore[misc]
        if not taken and not lock.acquire(blocking=False):
            return handing.contended(spec, lock, self.module_path)
        try:
            result = super().call(*args, **kwargs)  # type: ignore[misc]
        except BaseException:
            handing.release_quietly(lock)
            serve_rerun()
            raise
        lock.release()  # (LockLost: the task ran without its name for a while)
        serve_rerun()
        return result


def _running_id(args: tuple[Any, ...], takes_context: bool) -> str | None:
    result = getattr(args[0], "task_result", None) if takes_context and args else None
    if result is None:
        result = records.running_task_result()
    return None if result is None else str(result.id)


_CLASSES: dict[type, type] = {}


def unique_class(base: type) -> type:
    """The unique subclass of the task class ``base`` (made once per base)."""
    made = _CLASSES.get(base)
    if made is None:
        namespace = {
            "__annotations__": {"uniqueness": Uniqueness},
            "uniqueness": field(default=None, compare=False),
            "__module__": __name__,
        }
        made = dataclass(frozen=True, kw_only=True)(
            type(f"Unique{base.__name__}", (UniqueTaskMixin, base), namespace)
        )
        _CLASSES[base] = made
    return made


def make_unique(task: Any, uniqueness: Uniqueness) -> Any:
    """A copy of ``task`` of its unique class."""
    values = {f.name: getattr(task, f.name) for f in fields(task) if f.init}
    return unique_class(type(task))(**values, uniqueness=uniqueness)

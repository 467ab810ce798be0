"""The steps every unique task takes, whatever runs it (Django's task framework, Celery): the
enqueue that takes the name and hands it off, the worker that takes it over, the look at who
holds it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django_redis_locks.connection import get_backend
from django_redis_locks.core.errors import (
    AlreadyQueued,
    LockBackendError,
    LockLost,
    LockNotAcquired,
)
from django_redis_locks.core.handoff import hand_off, take_over
from django_redis_locks.core.info import HolderInfo
from django_redis_locks.core.lock import Lock
from django_redis_locks.core.protocol.tickets import FINISHED
from django_redis_locks.core.registry import get_lock

from . import records
from .spec import Uniqueness, is_queued

__all__ = [
    "Existing",
    "conflict",
    "contended",
    "enqueue",
    "enqueue_holding",
    "existing",
    "rerun_if_asked",
    "take_queued",
]

logger = logging.getLogger("django_redis_locks.unique")

R = TypeVar("R")


@dataclass(frozen=True)
class Existing:
    """The task that holds a unique task's name: ``phase`` "queued" (enqueued, no worker
    has started it) or "running"; ``task_id`` when known; ``result`` its handle (a Django
    TaskResult when its backend has it, a Celery AsyncResult) or None; ``holder`` the
    lock's listing."""

    name: str
    phase: str
    task_id: str | None
    holder: HolderInfo
    result: Any


#: How many times an enqueue looks again when the name changes hands as it looks or asks
#: (each time: the hold it found ended, and the name is free or another task's).
_TRIES = 5


def enqueue(
    spec: Uniqueness,
    lock: Lock,
    send: Callable[[], R],
    task: str,
    handle: Callable[[str], Any],
    *,
    task_id: str | None = None,
) -> Any:
    """Take ``lock`` (a queued hold) and enqueue the task (``send``), handing it the hold;
    or, the name taken, do as ``spec.on_conflict`` says: raise AlreadyQueued, return the
    existing task's handle (``"skip"``), or (``"reschedule"``) return it once the task is
    sure to run after that one: a queued task will, a running one is asked to enqueue its
    task again when its run ends."""
    found = None
    for _ in range(_TRIES):
        if lock.acquire(blocking=False):
            if spec.on_conflict == "reschedule":  # a rerun asked before: this task is it
                try:
                    records.take_rerun(lock.backend, lock.name)
                except BaseException:
                    release_quietly(lock)
                    raise
            return enqueue_holding(lock, spec, send, task_id)
        found = existing(spec, lock.name, handle)
        if found is None:
            continue  # freed as it looked (an expiry, a release): take it
        if spec.on_conflict != "reschedule":
            return conflict(found, spec, lock.name, task)
        if found.phase == "queued" or _rerun_asked(spec, lock, found):
            logger.info("enqueue: %s rescheduled after the %s task", task, found.phase)
            return found.result
    if spec.on_conflict != "reschedule":  # (freed and taken again every time it looked)
        return conflict(found, spec, lock.name, task)
    logger.warning("enqueue: %s: %r kept changing hands; not rescheduled", task, lock.name)
    return found.result if found is not None else None


def _rerun_asked(spec: Uniqueness, lock: Lock, found: Existing) -> bool:
    """Ask the run that ``found`` holds the name for a rerun: True once it is sure to see
    the request (its hold is still there after the request, and a run takes requests only
    after it has given its hold back), False if the name changed hands meanwhile (the
    request is taken back: look again)."""
    records.ask_rerun(lock.backend, lock.name, spec.queued_timeout)
    now = get_lock(lock.name, using=spec.using)
    if now is not None and now.holder_id == found.holder.holder_id:
        return True
    return not records.take_rerun(lock.backend, lock.name)  # (else the run took it: fine)


def rerun_if_asked(spec: Uniqueness, lock: Lock, enqueue_again: Callable[[], Any]) -> None:
    """After a hold of a running task was given back (a run that ended; a worker that let
    the name go as it started, or as it found its run a duplicate): enqueue the task again
    if a rerun was asked (``on_conflict="reschedule"``) while the hold was there. Never
    raises: the run's outcome stands."""
    if spec.on_conflict != "reschedule":
        return
    try:
        if records.take_rerun(lock.backend, lock.name):
            enqueue_again()
    except Exception:
        logger.exception("rerun: lock %r: the task asked to run again was not enqueued", lock.name)


def enqueue_holding(
    lock: Lock, spec: Uniqueness, send: Callable[[], R], task_id: str | None = None
) -> R:
    """Hand off ``lock`` (held by this thread) to the task that ``send`` enqueues: the
    ticket is recorded first (for ``task_id`` if known), so that the task finds it however
    soon it runs; if recording it or ``send`` raises, the name is given back."""
    try:
        ticket = hand_off(lock)
    except LockBackendError:  # (a late copy of its acquire may land: not handed off)
        release_quietly(lock)
        raise
    backend = lock.backend
    try:
        records.write(backend, lock.name, ticket, spec.queued_timeout, task_id)
        sent = send()
    except BaseException:
        _give_back(lock, ticket)
        raise
    if task_id is None:
        records.name_task(backend, lock.name, ticket, str(getattr(sent, "id", "")))
    return sent


def _give_back(lock: Lock, ticket: str) -> None:
    """The enqueue failed: the name is free again (unless a worker has it already)."""
    try:
        if take_over(lock, ticket):
            records.delete(lock.backend, lock.name)
            lock.release()
    except Exception:
        logger.exception("release: lock %r of a task whose enqueue failed", lock.name)


def take_queued(lock: Lock, task_id: str | None) -> bool:
    """Take over (for this thread) the hold that this task's enqueue handed off, if it is
    still there and not another task's (a call that is no worker's run, ``task_id`` None,
    takes nothing)."""
    if task_id is None:
        return False
    record = records.read(lock.backend, lock.name)
    if record is None:
        return False
    queued_id, ticket = record
    if ticket == FINISHED or (queued_id is not None and queued_id != task_id):
        return False  # a run that has ended, or another task's (this one's ran out queued)
    if not take_over(lock, ticket):
        return False
    records.delete(lock.backend, lock.name)
    return True


def existing(spec: Uniqueness, name: str, handle: Callable[[str], Any]) -> Existing | None:
    """Who holds ``name``: None if nobody; ``handle(task_id)`` makes the task's handle."""
    holder = get_lock(name, using=spec.using)
    if holder is None:
        return None
    task_id = holder.django_task_id or holder.celery_task_id
    if task_id is None:
        task_id = records.queued_task_id(get_backend(spec.using), holder)
    result = None
    if task_id is not None:
        try:
            result = handle(task_id)
        except Exception:  # another backend's task, or a result already removed
            result = None
    return Existing(name, "queued" if is_queued(holder) else "running", task_id, holder, result)


def conflict(found: Existing | None, spec: Uniqueness, name: str, task: str) -> Any:
    """An enqueue that found ``name`` taken: raise AlreadyQueued, or (``"skip"``) return
    the existing task's handle."""  # ("reschedule": see enqueue)
    phase = "queued or running" if found is None else found.phase
    task_id = found.task_id if found is not None else None
    if spec.on_conflict == "skip":
        logger.info("enqueue: %s skipped: %r is %s", task, name, phase)
        return found.result if found is not None else None
    raise AlreadyQueued(
        f"{task}: a task named {name!r} is {phase}" + (f" (task {task_id})" if task_id else ""),
        task_id=task_id,
    )


def contended(spec: Uniqueness, lock: Lock, task: str) -> Any:
    """A worker that cannot have the name: raise LockNotAcquired, or return skip_result."""
    message = f"{task}: lock {lock.name!r} is held by another run"
    if spec.on_contention == "skip":
        logger.info("run: %s skipped", message)
        return spec.skip_result
    raise LockNotAcquired(message)


def release_quietly(lock: Lock) -> None:
    """Release after a failure: the failure is the error to raise."""
    try:
        lock.release()
    except LockLost as error:
        logger.error("release: lock %r of a failed task: %s", lock.name, error)
    except Exception:
        logger.exception("release: lock %r of a failed task", lock.name)

"""The list's table, line by line: each entry's holders, then the first of its waiters.

A line is a plain dict for the rows template; the name, count and waiting cells of an entry
span all of its lines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django_redis_locks.core.info import Described, HolderInfo, SemaphoreInfo, WaiterInfo

from .listing import Entry, holders_of

__all__ = ["duration", "lines"]

ReleaseUrl = Callable[[HolderInfo], str | None]


def duration(seconds: float) -> str:
    """A short text for a span of time: "4.2 s", "3 min 12 s", "2 h 5 min"."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def _who(info: Described) -> dict[str, Any]:
    """How the holder cell names where a holder or waiter runs, and in which task."""
    thread = (info.thread or "").split(" (", 1)[0]  # without the thread ident
    if info.celery_task_name or info.celery_task_id:
        task = ("Celery task", info.celery_task_name or "?", info.celery_task_id or "?")
    elif info.django_task_name or info.django_task_id:
        task = ("Django task", info.django_task_name or "?", info.django_task_id or "?")
    else:
        task = None
    runs = f"task {info.task}" if info.task else info.greenlet or thread
    return {"info": info, "runs": runs, "task": task}


def _holder(hold: HolderInfo, release_url: ReleaseUrl) -> dict[str, Any]:
    every = hold.renewed_every
    return {
        **_who(hold),
        "type": "holder",
        "held_ms": int(hold.held * 1000),
        "held": duration(hold.held),
        "ttl_ms": int(hold.ttl * 1000),
        "renewed": hold.renewed,
        "renewed_every": None if every is None else f"{every:g} s",
        "release_url": release_url(hold),
    }


def _waiter(waiter: WaiterInfo) -> dict[str, Any]:
    return {
        **_who(waiter),
        "type": "waiter",
        "held_ms": int(waiter.waited * 1000),
        "held": duration(waiter.waited),
    }


def lines(entries: list[Entry], release_url: ReleaseUrl) -> list[dict[str, Any]]:
    """The table's lines for ``entries``: holders, waiters shown, and a line for the waiters
    not shown (or for a semaphore nobody holds)."""
    found: list[dict[str, Any]] = []
    for entry in entries:
        waiters = entry.waiters
        own: list[dict[str, Any]] = [_holder(hold, release_url) for hold in holders_of(entry)]
        if not own:
            own.append({"type": "none"})
        own.extend(_waiter(waiter) for waiter in waiters)
        if entry.waiting > len(waiters):
            own.append({"type": "more", "more": entry.waiting - len(waiters)})
        shared = {
            "name": entry.name,
            "fence": entry.fence if isinstance(entry, HolderInfo) else None,
            "limit": entry.limit if isinstance(entry, SemaphoreInfo) else None,
            "count": entry.count if isinstance(entry, SemaphoreInfo) else None,
            "waiting": entry.waiting,
        }
        for index, line in enumerate(own):
            line.update(entry=shared, first=index == 0, span=len(own))
        found.extend(own)
    return found

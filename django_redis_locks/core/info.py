"""What listings show: holders, waiters, locks and semaphores as plain, immutable records."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, Literal, TypeVar

from .protocol.replies import text

__all__ = [
    "MAX_WAITERS_SHOWN",
    "HolderInfo",
    "Page",
    "SemaphoreInfo",
    "WaiterInfo",
    "parse_lock",
    "parse_semaphore",
]

T = TypeVar("T")
Kind = Literal["lock", "semaphore"]

#: How many waiters a listing describes per lock or semaphore (the first in the queue); the
#: count of those who wait is always whole.
MAX_WAITERS_SHOWN = 10


class Described:
    """Who a holder or waiter is, read from its ``metadata``: where it runs (host, pid,
    thread, asyncio task or greenlet), the caller's label, the Celery or Django task the
    decorator ran in, and how often its hold is renewed."""

    __slots__ = ()
    metadata: dict[str, Any]

    @property
    def host(self) -> str | None:
        return _str_or_none(self.metadata.get("host"))

    @property
    def pid(self) -> int | None:
        return _int_or_none(self.metadata.get("pid"))

    @property
    def thread(self) -> str | None:
        return _str_or_none(self.metadata.get("thread"))

    @property
    def task(self) -> str | None:
        """The asyncio task's name."""
        return _str_or_none(self.metadata.get("task"))

    @property
    def greenlet(self) -> str | None:
        return _str_or_none(self.metadata.get("greenlet"))

    @property
    def label(self) -> str | None:
        return _str_or_none(self.metadata.get("label"))

    @property
    def celery_task_id(self) -> str | None:
        return _str_or_none(self.metadata.get("celery_task_id"))

    @property
    def celery_task_name(self) -> str | None:
        return _str_or_none(self.metadata.get("celery_task"))

    @property
    def django_task_id(self) -> str | None:
        return _str_or_none(self.metadata.get("django_task_id"))

    @property
    def django_task_name(self) -> str | None:
        return _str_or_none(self.metadata.get("django_task"))

    @property
    def renewed(self) -> bool:
        """Whether the hold is kept with ``auto_renew`` (renewed while its owner runs)."""
        renew = self.metadata.get("renew")
        return renew is True or (_number(renew) or 0) > 0

    @property
    def renewed_every(self) -> float | None:
        """Seconds between renewals of an ``auto_renew`` hold (None: not renewed, or its TTL
        was left to the configured default)."""
        return _number(self.metadata.get("renew"))


@dataclass(frozen=True, slots=True)
class WaiterInfo(Described):
    """One caller blocked in the queue of a lock or semaphore, as Redis had it when read.

    ``holder_id`` is the id its hold will have (its token is never shown); ``queued_at`` when
    it joined the queue; ``lease_expires_at`` until when its place is kept unless it asks
    again (a live waiter keeps asking; a dead one drops out then). Times are the Redis
    server's, in UTC.
    """

    name: str
    kind: Kind
    holder_id: str
    queued_at: datetime
    lease_expires_at: datetime
    waited: float  # seconds in the queue when read
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HolderInfo(Described):
    """One hold of a lock or of a semaphore slot, as Redis had it when it was read.

    ``holder_id`` names the hold without revealing its token (pass it to ``force_release``).
    ``host``, ``pid``, ``thread``, ``task``, ``greenlet`` and ``label`` come from
    ``metadata``, which holds everything the holder recorded. Times are the Redis server's,
    in UTC.
    ``fence`` is the lock's fencing number; ``ticket`` the semaphore holder's place in arrival
    order. ``held`` is how long it was held when read (seconds). A lock's record also says
    how many wait for it (``waiting``) and who comes first (``waiters``, at most
    ``MAX_WAITERS_SHOWN``, in queue order); a semaphore's record has its own. Records compare by
    value and hash by (kind, name, holder id).
    """

    name: str
    kind: Kind
    holder_id: str
    acquired_at: datetime
    expires_at: datetime
    ttl: float  # seconds left when read
    metadata: dict[str, Any] = field(default_factory=dict)
    fence: int | None = None
    ticket: int | None = None
    held: float = 0.0
    waiting: int = 0
    waiters: tuple[WaiterInfo, ...] = ()

    def __hash__(self) -> int:
        return hash((self.kind, self.name, self.holder_id))


@dataclass(frozen=True, slots=True)
class SemaphoreInfo:
    """A semaphore: its limit, how many hold and wait, the holders (soonest to expire first)
    and the first waiters (at most ``MAX_WAITERS_SHOWN``, in queue order)."""

    name: str
    limit: int
    waiting: int
    holders: tuple[HolderInfo, ...]
    waiters: tuple[WaiterInfo, ...] = ()

    @property
    def count(self) -> int:
        return len(self.holders)

    @classmethod
    def empty(cls, name: str, limit: int) -> SemaphoreInfo:
        return cls(name=name, limit=limit, waiting=0, holders=())


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing; pass ``cursor`` to the same call for the next (None: done)."""

    items: list[T]
    cursor: str | None


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _when(ms: Any) -> datetime:
    return datetime.fromtimestamp(int(text(ms)) / 1000, tz=UTC)


def _metadata(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(text(raw))
    except ValueError:
        return {"raw": text(raw)}
    return value if isinstance(value, dict) else {"raw": value}


def parse_lock(name: str, entry: Sequence[Any], now_ms: int) -> HolderInfo | None:
    """An entry of a ``lock_inspect`` reply; None when the lock is free."""
    if not entry:
        return None
    holder, fence, acquired, expires, pttl, meta, *queue = entry
    waiting, *waiters = queue or [0]
    return HolderInfo(
        name=name,
        kind="lock",
        holder_id=text(holder),
        acquired_at=_when(acquired),
        expires_at=_when(expires),
        ttl=max(int(pttl), 0) / 1000,
        metadata=_metadata(meta),
        fence=int(text(fence)),
        held=_since(acquired, now_ms),
        waiting=int(waiting),
        waiters=_waiters(name, "lock", waiters, now_ms, 1),
    )


def parse_semaphore(name: str, entry: Sequence[Any], now_ms: int) -> SemaphoreInfo | None:
    """An entry of a ``sem_inspect`` reply; None when nobody holds or waits."""
    limit, waiting, *holders, waiters = entry
    if not holders and not int(waiting):
        return None
    return SemaphoreInfo(
        name=name,
        limit=int(limit),
        waiting=int(waiting),
        holders=tuple(
            HolderInfo(
                name=name,
                kind="semaphore",
                holder_id=text(holder),
                acquired_at=_when(acquired),
                expires_at=_when(expires),
                ttl=max(int(text(expires)) - now_ms, 0) / 1000,
                metadata=_metadata(meta),
                ticket=int(text(ticket)),
                held=_since(acquired, now_ms),
            )
            for holder, acquired, expires, ticket, meta in holders
        ),
        waiters=_waiters(name, "semaphore", waiters, now_ms, 1000),
    )


def _since(ms: Any, now_ms: int) -> float:
    return max(now_ms - int(text(ms)), 0) / 1000


def _waiters(
    name: str, kind: Kind, entries: Sequence[Any], now_ms: int, per_ms: int
) -> tuple[WaiterInfo, ...]:
    """Waiters of an inspection reply: (holder id, arrival in ``1/per_ms`` ms, lease expiry
    in ms, metadata) each."""
    found = []
    for holder, arrival, lease, meta in entries:
        queued_ms = int(text(arrival)) // per_ms
        found.append(
            WaiterInfo(
                name=name,
                kind=kind,
                holder_id=text(holder),
                queued_at=_when(queued_ms),
                lease_expires_at=_when(lease),
                waited=max(now_ms - queued_ms, 0) / 1000,
                metadata=_metadata(meta),
            )
        )
    return tuple(found)

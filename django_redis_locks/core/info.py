"""What listings show: holders, locks and semaphores as plain, immutable records."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, Literal, TypeVar

from .protocol.replies import text

__all__ = ["HolderInfo", "Page", "SemaphoreInfo", "parse_lock", "parse_semaphore"]

T = TypeVar("T")
Kind = Literal["lock", "semaphore"]


@dataclass(frozen=True, slots=True)
class HolderInfo:
    """One hold of a lock or of a semaphore slot, as Redis had it when it was read.

    ``holder_id`` names the hold without revealing its token (pass it to ``force_release``).
    ``host``, ``pid``, ``thread``, ``task``, ``greenlet`` and ``label`` come from
    ``metadata``, which holds everything the holder recorded. Times are the Redis server's,
    in UTC.
    ``fence`` is the lock's fencing number; ``ticket`` the semaphore holder's place in arrival
    order. Records compare by value and hash by (kind, name, holder id).
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

    def __hash__(self) -> int:
        return hash((self.kind, self.name, self.holder_id))

    @property
    def host(self) -> str | None:
        return _str_or_none(self.metadata.get("host"))

    @property
    def pid(self) -> int | None:
        pid = self.metadata.get("pid")
        return pid if isinstance(pid, int) and not isinstance(pid, bool) else None

    @property
    def thread(self) -> str | None:
        return _str_or_none(self.metadata.get("thread"))

    @property
    def task(self) -> str | None:
        return _str_or_none(self.metadata.get("task"))

    @property
    def greenlet(self) -> str | None:
        return _str_or_none(self.metadata.get("greenlet"))

    @property
    def label(self) -> str | None:
        return _str_or_none(self.metadata.get("label"))


@dataclass(frozen=True, slots=True)
class SemaphoreInfo:
    """A semaphore: its limit, how many hold and wait, and the holders (soonest to expire
    first)."""

    name: str
    limit: int
    waiting: int
    holders: tuple[HolderInfo, ...]

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
    holder, fence, acquired, expires, pttl, meta = entry
    return HolderInfo(
        name=name,
        kind="lock",
        holder_id=text(holder),
        acquired_at=_when(acquired),
        expires_at=_when(expires),
        ttl=max(int(pttl), 0) / 1000,
        metadata=_metadata(meta),
        fence=int(text(fence)),
    )


def parse_semaphore(name: str, entry: Sequence[Any], now_ms: int) -> SemaphoreInfo | None:
    """An entry of a ``sem_inspect`` reply; None when nobody holds or waits."""
    limit, waiting, *holders = entry
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
            )
            for holder, acquired, expires, ticket, meta in holders
        ),
    )

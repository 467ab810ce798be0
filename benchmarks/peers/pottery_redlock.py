"""pottery's ``Redlock`` with a single master (its usual single-server configuration)."""

from __future__ import annotations

import redis
from pottery import Redlock

from benchmarks.registry import Impl, register

__all__ = ["PotteryAdapter"]


class PotteryAdapter:
    """``Redlock(key=name, masters={client}, auto_release_time=ttl)``, one per process."""

    def __init__(self, client: redis.Redis, name: str, ttl: float) -> None:
        self._lock = Redlock(key=name, masters={client}, auto_release_time=ttl)

    def acquire(self, blocking: bool, timeout: float | None = None) -> bool:
        if not blocking:
            return bool(self._lock.acquire(blocking=False))
        return bool(self._lock.acquire(blocking=True, timeout=-1 if timeout is None else timeout))

    def release(self) -> None:
        self._lock.release()

    def close(self) -> None:
        pass


register(
    Impl(
        name="pottery",
        label="pottery Redlock (1 master)",
        kind="lock",
        factory=PotteryAdapter,
        waits_by="random sleep up to 0.2 s between tries",
        note="quorum logic runs even with one master (a thread pool per attempt)",
    )
)

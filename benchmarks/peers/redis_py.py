"""redis-py's ``redis.lock.Lock`` (what ``client.lock()`` and django-redis return).

Registered twice: with its default 0.1 s sleep between blocking tries, and with 1 ms, the
setting a user tunes for lower latency at the price of polling Redis.
"""

from __future__ import annotations

import redis
from redis.lock import Lock as RedisPyLock

from benchmarks.registry import BLOCK, Impl, register

__all__ = ["RedisPyAdapter"]


class RedisPyAdapter:
    """``client.lock(name, timeout=ttl, sleep=...)``, one object per process."""

    def __init__(self, client: redis.Redis, name: str, ttl: float, sleep: float = 0.1) -> None:
        self._lock: RedisPyLock = client.lock(name, timeout=ttl, sleep=sleep)

    def acquire(self, blocking: bool, timeout: float | None = None) -> bool:
        if not blocking:
            return bool(self._lock.acquire(blocking=False))
        return bool(self._lock.acquire(blocking=True, blocking_timeout=timeout))

    def release(self) -> None:
        self._lock.release()

    def close(self) -> None:
        pass


def _fast_polling(client: redis.Redis, name: str, ttl: float) -> RedisPyAdapter:
    return RedisPyAdapter(client, name, ttl, sleep=0.001)


register(
    Impl(
        name="redis-py",
        label="redis-py Lock",
        kind="lock",
        factory=RedisPyAdapter,
        waits_by="sleep 0.1 s between tries (default)",
        note="SET NX PX to acquire, a compare-and-delete script to release",
    )
)
register(
    Impl(
        name="redis-py-1ms",
        label="redis-py Lock, sleep=0.001",
        kind="lock",
        factory=_fast_polling,
        capabilities=frozenset({BLOCK}),  # tries and uncontended cycles are redis-py's own
        waits_by="sleep 1 ms between tries",
        note="the same lock tuned to poll every millisecond while blocked",
    )
)

"""python-redis-lock (``redis_lock.Lock``): SET NX EX, and BLPOP on a signal list to wait."""

from __future__ import annotations

import logging
import math

import redis
import redis_lock  # type: ignore[import-untyped]

from benchmarks.registry import Impl, register

__all__ = ["PythonRedisLockAdapter"]


class PythonRedisLockAdapter:
    """``redis_lock.Lock(client, name, expire=ttl)``, one object per process."""

    def __init__(self, client: redis.Redis, name: str, ttl: float) -> None:
        # It logs a warning for every failed non-blocking try; with no logging configured
        # those go to stderr, which would bill the terminal's time to the lock.
        logging.getLogger("redis_lock").setLevel(logging.ERROR)
        self._ttl = max(1, math.ceil(ttl))
        self._lock = redis_lock.Lock(client, name, expire=self._ttl)

    def acquire(self, blocking: bool, timeout: float | None = None) -> bool:
        if not blocking:
            return bool(self._lock.acquire(blocking=False))
        if timeout is None:
            return bool(self._lock.acquire(blocking=True))
        # Its timeout is a whole number of seconds, at least 1 and at most the expiry.
        whole = min(self._ttl, max(1, math.ceil(timeout)))
        return bool(self._lock.acquire(blocking=True, timeout=whole))

    def release(self) -> None:
        self._lock.release()

    def close(self) -> None:
        pass


register(
    Impl(
        name="python-redis-lock",
        label="python-redis-lock",
        kind="lock",
        factory=PythonRedisLockAdapter,
        waits_by="BLPOP on a signal list",
        note="release pushes one signal; blocking timeouts are whole seconds",
    )
)

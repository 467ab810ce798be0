"""Our lock and semaphore (``django_redis_locks.core``) behind the benchmark adapter interface."""

from __future__ import annotations

import redis

from benchmarks.registry import Impl, register, semaphore
from django_redis_locks.core import Backend, Lock, Semaphore

__all__ = ["OursAdapter", "OursSemaphoreAdapter"]


class OursAdapter:
    """One ``Lock`` object per process, used the documented way (``client=`` outside Django)."""

    def __init__(self, client: redis.Redis, name: str, ttl: float) -> None:
        # A namespace (hence a wake-up channel) per trial: wake-up listeners that earlier
        # trials left in this worker process (they end after 30 s idle) hear nothing of it.
        self._backend = Backend(client, namespace="drl-" + name.rsplit(":", 1)[-1])
        self._lock = Lock(name, client=self._backend, timeout=ttl)

    def acquire(self, blocking: bool, timeout: float | None = None) -> bool:
        if not blocking:
            return self._lock.acquire(blocking=False)
        return self._lock.acquire(blocking=True, timeout=timeout)

    def release(self) -> None:
        self._lock.release()

    def close(self) -> None:
        self._backend.close()


class OursSemaphoreAdapter:
    """One ``Semaphore`` object per process (``client=`` a Backend, a namespace per trial)."""

    def __init__(self, client: redis.Redis, name: str, ttl: float, limit: int) -> None:
        self._backend = Backend(client, namespace="drl-" + name.rsplit(":", 1)[-1])
        self._semaphore = Semaphore(name, limit, client=self._backend, timeout=ttl)

    def acquire(self, blocking: bool, timeout: float | None = None) -> bool:
        if not blocking:
            return self._semaphore.acquire(blocking=False)
        return self._semaphore.acquire(blocking=True, timeout=timeout)

    def release(self) -> None:
        self._semaphore.release()

    def close(self) -> None:
        self._backend.close()


register(
    Impl(
        name="ours",
        label="django-redis-locks",
        kind="lock",
        factory=OursAdapter,
        ours=True,
        waits_by="pub/sub wake-up",
        note="acquire and release are one EVALSHA each; waiters woken by the release",
    )
)
register(
    semaphore(
        "ours-sem",
        "django-redis-locks Semaphore",
        OursSemaphoreAdapter,
        ours=True,
        waits_by="queue; a release admits the next waiter and wakes it (pub/sub)",
        note="acquire and release are one EVALSHA each",
        guarantees="server time (TIME) for every expiry; FIFO admission of blocked waiters "
        "(a queue with tickets), a non-blocking try never overtakes a queued waiter; holder "
        "metadata, listed in the registry",
    )
)

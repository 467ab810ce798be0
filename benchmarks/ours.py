"""Our lock and semaphore (``django_redis_locks.core``) behind the benchmark adapter interface."""

from __future__ import annotations

import threading

import redis

from benchmarks.registry import CYCLE, Impl, register, semaphore
from django_redis_locks.core import Backend, Lock, Semaphore
from django_redis_locks.core.lock import session_of
from django_redis_locks.core.protocol import lock_calls as lock_protocol
from django_redis_locks.core.protocol import semaphore_calls as semaphore_protocol
from django_redis_locks.core.protocol.holder import holder_metadata, new_token
from django_redis_locks.core.protocol.scripting import Call, run
from django_redis_locks.core.validation import to_millis

__all__ = ["OursAdapter", "OursScripts", "OursSemaphoreAdapter", "OursSemaphoreScripts"]


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


class OursScripts:
    """Our lock's two scripts alone, with the arguments a ``Lock`` sends for a try (a fresh
    token each cycle), and none of the library's Python around them: what a cycle would cost
    if the library's own Python cost nothing. Its ratio to ``floor`` is the least any Python
    on these scripts can reach."""

    def __init__(self, client: redis.Redis, name: str, ttl: float) -> None:
        self._client = client
        self._lock = Lock(
            name, client=Backend(client, namespace="drl-bound-" + name.rsplit(":", 1)[-1])
        )
        self._keys = self._lock._keys_for(self._lock.backend)
        owner = threading.current_thread()
        self._session = session_of(owner)
        self._metadata = holder_metadata(owner, "")
        self._ttl_ms = to_millis(ttl)
        self._release: Call | None = None

    def acquire(self, blocking: bool, timeout: float | None = None) -> bool:
        token = new_token()
        call = lock_protocol.acquire_call(
            self._keys,
            token,
            self._ttl_ms,
            self._metadata,
            lease_ms=lock_protocol.WAITER_LEASE_MS,
            session=self._session,
            slice_ms=self._lock._slice_ms,
        )
        self._release = lock_protocol.release_call(self._keys, token)
        return int(run(self._client, call)[0]) == 1

    def release(self) -> None:
        assert self._release is not None
        run(self._client, self._release)

    def close(self) -> None:
        self._lock.backend.close()


class OursSemaphoreScripts:
    """The semaphore's two scripts alone, like :class:`OursScripts`."""

    def __init__(self, client: redis.Redis, name: str, ttl: float, limit: int) -> None:
        self._client = client
        self._backend = Backend(client, namespace="drl-bound-" + name.rsplit(":", 1)[-1])
        self._semaphore = Semaphore(name, limit, client=self._backend)
        self._keys = self._semaphore._keys_for(self._backend)
        self._metadata = holder_metadata(threading.current_thread(), "")
        self._ttl_ms = to_millis(ttl)
        self._release: Call | None = None

    def acquire(self, blocking: bool, timeout: float | None = None) -> bool:
        token = new_token()
        call = semaphore_protocol.acquire_call(
            self._keys,
            token,
            self._semaphore.limit,
            self._ttl_ms,
            self._metadata,
            queue=False,
            lease_ms=lock_protocol.WAITER_LEASE_MS,
        )
        self._release = semaphore_protocol.release_call(self._keys, token)
        return int(run(self._client, call)[0]) == 1

    def release(self) -> None:
        assert self._release is not None
        run(self._client, self._release)

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
register(
    Impl(
        name="ours-scripts",
        label="our lock's scripts alone (no library Python)",
        kind="bound",
        factory=OursScripts,
        capabilities=frozenset({CYCLE}),
        note="the two EVALSHAs of a cycle of ours, sent directly: a bound, not a lock to use",
    )
)
register(
    semaphore(
        "ours-sem-scripts",
        "our semaphore's scripts alone (no library Python)",
        OursSemaphoreScripts,
        kind="bound",
        note="the two EVALSHAs of a cycle of ours-sem, sent directly: a bound",
    )
)

"""Helpers of the tests: probes of a lock's state in Redis (held or not, for how long), a
Backend that talks through a fault-injecting proxy, and a release that must wake a waiter.

A lock's hash outlives its hold (it keeps the fence for a while), so "held" means: a token
is set and its ``expires`` (server time, ms) is still ahead of the server's clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis

from django_redis_locks.core import Backend, Lock, Semaphore
from tests.harness.clients import sync_from_url
from tests.harness.proxy import ReplyProxy
from tests.harness.servers import hub_listens_for, wait_until


def seconds_to_wake_a_waiter(backend: Backend, name: str) -> float:
    """Hold lock ``name``, let another thread block on it, release: how long after the release
    the waiter had it. Under a second means the wake-up message woke it (a waiter that was
    not woken finds out only at its re-check, seconds later)."""
    holder = Lock(name, client=backend, timeout=10)
    assert holder.acquire()
    woken: list[float] = []
    waiter = Lock(name, client=backend, timeout=10)

    def wait() -> None:
        if waiter.acquire(timeout=10):
            woken.append(time.monotonic())
            waiter.release()

    thread = threading.Thread(target=wait)
    thread.start()
    member = waiter._keys_for(backend).member
    wait_until(lambda: hub_listens_for(backend, member), timeout=10, what="the waiter")
    released_at = time.monotonic()
    holder.release()
    thread.join(15)
    assert woken, "the waiter never had the lock"
    return woken[0] - released_at


def server_ms(client: Any) -> int:
    """The Redis server's clock, in whole milliseconds (what the scripts read)."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def held_ttl_ms(client: Any, key: str | bytes) -> int | None:
    """Milliseconds left on the hold stored at ``key``; None when nobody holds it."""
    token, expires = client.hmget(key, "token", "expires")
    if token is None or expires is None:
        return None
    left = int(expires) - server_ms(client)
    return left if left > 0 else None


def is_held(client: Any, key: str | bytes) -> bool:
    return held_ttl_ms(client, key) is not None


def stored_metadata(client: Any, key: str | bytes) -> bytes | None:
    """The holder metadata JSON a lock hash stores, in pieces of at most 64 bytes (m1, m2, ...;
    mn: how many, see lib/lock.lua), put together; None when no hold is stored."""
    pieces = client.hget(key, "mn")
    if pieces is None:
        return None
    parts = client.hmget(key, [f"m{i}" for i in range(1, int(pieces) + 1)])
    return b"".join(part.encode() if isinstance(part, str) else part for part in parts)


def only_recent_releases(client: Any, key: str | bytes) -> bool:
    """Whether the hash at ``key`` keeps nothing but the record of recent releases (and how
    long holds last, and until when the registry lists the name): what a semaphore leaves
    after its last holder released, for a while, so that a resent release is recognised."""
    fields = {f.decode() if isinstance(f, bytes) else f for f in client.hkeys(key)}
    return bool(fields) and fields <= {"gone", "avg", "l"}


@dataclass
class Proxied:
    """A Backend that talks to a server through a :class:`~tests.harness.proxy.ReplyProxy`
    (with the Backend's own retry policy), and a direct client of the server for checks."""

    proxy: ReplyProxy
    backend: Backend
    direct: redis.Redis


@contextmanager
def proxied_backend(
    server: Any, *, namespace: str, socket_timeout: float, decode_direct: bool = False
) -> Iterator[Proxied]:
    """A :class:`Proxied` on ``server``, its scripts loaded through the proxy first (a lock's
    and a semaphore's acquire and release), so that no NOSCRIPT round trip is cut or withheld
    by a test."""
    with ReplyProxy(server.host, server.port) as proxy:
        client = sync_from_url(  # redis-py's, or valkey-py's with DRL_TEST_CLIENT=valkey
            f"redis://{proxy.host}:{proxy.port}/0",
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
        )
        backend = Backend(client, namespace=namespace)
        for primitive in (Lock("warm-up", client=backend), Semaphore("warm-up", 1, client=backend)):
            assert primitive.acquire(blocking=False)
            primitive.release()
        with server.client(socket_timeout=5, decode_responses=decode_direct) as direct:
            yield Proxied(proxy, backend, direct)
        backend.close()
        client.close()

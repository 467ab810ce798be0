"""Blocked waiters are woken by a release (pub/sub), not by polling."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time

import redis

from django_redis_locks import Lock
from django_redis_locks.core import Backend
from tests.harness.servers import hub_has_waiter, wait_until


def waiting(backend: Backend, lock: Lock) -> bool:
    member = lock._keys_for(backend).member
    return hub_has_waiter(backend, member)


def evalsha_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def test_waiter_wakes_within_milliseconds_of_release(backend: Backend) -> None:
    holder = Lock("handoff", client=backend, timeout=10)
    waiter_lock = Lock("handoff", client=backend, timeout=10)
    latencies: list[float] = []
    for _ in range(50):
        assert holder.acquire()
        acquired_at: list[float] = []

        def wait_for_it(acquired_at: list[float] = acquired_at) -> None:
            assert waiter_lock.acquire(timeout=10)
            acquired_at.append(time.perf_counter())
            waiter_lock.release()

        thread = threading.Thread(target=wait_for_it)
        thread.start()
        wait_until(lambda: waiting(backend, waiter_lock), timeout=5, what="waiter registered")
        released_at = time.perf_counter()
        holder.release()
        thread.join(timeout=10)
        latencies.append(acquired_at[0] - released_at)
    median = statistics.median(latencies)
    print(f"handoff median {median * 1000:.2f} ms, max {max(latencies) * 1000:.2f} ms")
    assert median < 0.020


def test_blocked_waiter_does_not_poll(make_server) -> None:
    server = make_server()
    client = server.client(socket_timeout=5)
    backend = Backend(client, namespace="nopoll")
    holder = Lock("quiet", client=backend, timeout=10)
    holder.acquire()
    result: list[bool] = []
    thread = threading.Thread(
        target=lambda: result.append(Lock("quiet", client=backend, timeout=10).acquire(timeout=5))
    )
    thread.start()
    wait_until(lambda: waiting(backend, holder), timeout=5, what="waiter registered")
    before = evalsha_calls(client)
    blocked_since = time.monotonic()
    # The waiter stays blocked for 0.6 s: a polling lock would issue one try per interval.
    wait_until(lambda: time.monotonic() - blocked_since > 0.6, timeout=5, what="0.6 s")
    during = evalsha_calls(client) - before
    holder.release()
    thread.join(timeout=10)
    assert result == [True]
    assert during <= 1, f"the waiter ran {during} scripts while blocked"
    client.close()


def test_async_waiter_is_woken_by_a_sync_release(redis_server, namespace: str) -> None:
    client = redis.Redis.from_url(redis_server.url, socket_timeout=5)
    backend = Backend(client, namespace=namespace)
    holder = Lock("mixed", client=backend, timeout=10)
    held = threading.Event()

    async def wait_for_it() -> float:
        lock = Lock("mixed", client=backend, timeout=10)
        assert await lock.aacquire(timeout=10)
        acquired = time.perf_counter()
        await lock.arelease()
        return acquired

    released: list[float] = []

    def release_when_waiting() -> None:
        holder.acquire()
        held.set()
        wait_until(lambda: waiting(backend, holder), timeout=5, what="async waiter registered")
        released.append(time.perf_counter())
        holder.release()

    thread = threading.Thread(target=release_when_waiting)
    thread.start()
    held.wait(timeout=10)
    acquired = asyncio.run(wait_for_it())
    thread.join()
    assert acquired - released[0] < 0.5
    client.close()


def test_waiter_takes_over_when_the_holder_expires(backend: Backend) -> None:
    """No release ever comes (a crashed holder): the waiter retries when the TTL runs out."""
    crashed = Lock("crashed", client=backend, timeout=0.3)
    crashed.acquire()
    started = time.monotonic()
    assert Lock("crashed", client=backend, timeout=5).acquire(timeout=5)
    assert time.monotonic() - started < 1.5

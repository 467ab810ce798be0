"""Denial of service: a thousand blocked callers in one process stay cheap and all get through.

500 threads and 500 asyncio tasks (one event loop) wait on the same held lock, or on a full
one-slot semaphore, through one Backend on a private server, with redis-py's default pools (100
connections each). While they wait the server's ``connected_clients`` is sampled for longer
than a re-check interval: the library uses at most one pool's worth of connections for the
threads (the wake-up listener's included) and one for the event loop's tasks, never one per
caller. Then the holder releases: every caller gets the hold, one after another, in the order
they queued, and once the event loop has ended and the Backend is closed the connections are
gone again (but for the wake-up listener's, until it stops after 30 s idle).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from django_redis_locks import Lock, Semaphore
from django_redis_locks.core import Backend
from tests.harness.servers import RedisServer, probe_client, wait_until

WAITERS = 1000
THREADS = WAITERS // 2
TASKS = WAITERS - THREADS
#: redis-py's default pool size (sync and asyncio); the Backend's pools copy the given one's.
POOL = 100
#: Library connections while they wait: the threads' pool (the wake-up listener's connection
#: comes from it) and the event loop's.
BOUND = 2 * POOL


def connected(admin: redis.Redis) -> int:
    return int(admin.info("clients")["connected_clients"])


def holder_ids(admin: redis.Redis, queue_key: str) -> list[str]:
    """The queued tokens' holder ids, first come first."""
    tokens = admin.zrange(queue_key, 0, -1)
    return [hashlib.sha1(str(t).encode()).hexdigest()[:16] for t in tokens]


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_1000_blocked_callers_share_bounded_connections_and_pass_in_order(
    make_server: Callable[..., RedisServer], namespace: str, kind: str
) -> None:
    server = make_server()
    admin = probe_client(server, timeout=10)
    baseline = connected(admin)  # the probe itself
    client = redis.Redis.from_url(server.url, socket_timeout=10)
    assert client.connection_pool.max_connections == POOL
    backend = Backend(client, namespace=namespace)

    def make() -> Lock | Semaphore:
        if kind == "lock":
            return Lock("hot", client=backend, timeout=60)
        return Semaphore("hot", 1, client=backend, timeout=60)

    holder = make()
    assert holder.acquire()
    keys: Any = holder._keys_for(backend)
    queue_key = keys.queue
    order: list[str] = []
    errors: list[BaseException] = []

    def got(primitive: Lock | Semaphore) -> None:
        assert primitive.holder_id is not None
        order.append(primitive.holder_id)  # list.append is atomic

    def in_thread() -> None:
        try:
            primitive = make()
            assert primitive.acquire(timeout=120)
            got(primitive)
            primitive.release()
        except BaseException as error:
            errors.append(error)

    async def in_task() -> None:
        try:
            primitive = make()
            assert await primitive.aacquire(timeout=120)
            got(primitive)
            await primitive.arelease()
        except BaseException as error:
            errors.append(error)

    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, name="tasks")
    loop_thread.start()
    tasks = [asyncio.run_coroutine_threadsafe(in_task(), loop) for _ in range(TASKS)]
    threads = [threading.Thread(target=in_thread) for _ in range(THREADS)]
    try:
        for thread in threads:
            thread.start()
        wait_until(
            lambda: bool(errors) or admin.zcard(queue_key) == WAITERS,
            timeout=60,
            what=f"{WAITERS} callers to queue",
        )
        assert not errors, errors[:3]
        samples = []
        for _ in range(15):  # 1.5 s: past a re-check of every waiter (1 s locks, 0.5 s semaphores)
            samples.append(connected(admin) - baseline)
            time.sleep(0.1)
        peak = max(samples)
        print(f"\n{WAITERS} {kind} waiters ({THREADS} threads, {TASKS} tasks): {peak} connections")
        assert peak <= BOUND + 1, samples  # + 1: a connection closing while one opens
        queued = holder_ids(admin, queue_key)
        assert len(queued) == WAITERS

        started = time.monotonic()
        holder.release()
        for thread in threads:
            thread.join(120)
        for task in tasks:
            task.result(120)
        print(f"all {WAITERS} through in {time.monotonic() - started:.1f} s")
        assert not errors, errors[:3]
        assert order == queued  # one after another, first come first served
    finally:
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(10)
        loop.run_until_complete(loop.shutdown_asyncgens())  # closes the loop's client
        loop.close()

    assert connected(admin) - baseline <= POOL + 1  # the loop's connections are closed
    backend.close()
    client.close()
    # Only the wake-up listener may still be connected (it stops after 30 s without waiters).
    wait_until(lambda: connected(admin) - baseline <= 1, timeout=10, what="connections closed")
    admin.close()


def test_a_full_pool_makes_callers_wait_for_a_connection_not_fail(
    redis_server: Any, namespace: str
) -> None:
    """Regression: the Backend's pools raised "Too many connections" (LockBackendError) as soon
    as more calls than the pool's size ran at once; 900 of 1,000 blocked asyncio callers
    failed that way with redis-py's default pool of 100."""
    client = redis.Redis.from_url(redis_server.url, socket_timeout=5, max_connections=3)
    backend = Backend(client, namespace=namespace)
    errors: list[BaseException] = []

    def cycle(name: str) -> None:
        try:
            with Lock(name, client=backend, timeout=5):
                pass
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=cycle, args=(f"sync-{i}",)) for i in range(60)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    async def in_tasks() -> None:
        async def acycle(name: str) -> None:
            async with Lock(name, client=backend, timeout=5):
                pass

        await asyncio.gather(*(acycle(f"async-{i}") for i in range(60)))

    asyncio.run(in_tasks())
    assert not errors, errors[:3]
    assert len(backend.client.connection_pool._connections) <= 3
    backend.close()
    client.close()

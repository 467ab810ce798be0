"""Denial of service: a thousand blocked callers in one process stay cheap and all get through.

500 threads and 500 asyncio tasks (one event loop) wait on the same held lock, or on a full
one-slot semaphore, through one Backend with pools of 100 connections (redis-py 8's default),
on a private server and on a private three-master Cluster. While they wait the servers'
``connected_clients`` is sampled for longer than a re-check interval: the library uses at most
one pool's worth of connections for the threads (the wake-up listener's included) and one for
the event loop's tasks, never one per caller. Then the holder releases: every caller gets the
hold, one after another, in the order they queued, and once the event loop has ended and the
Backend is closed the connections are gone again (but for the wake-up listener's, until it
stops after 30 s idle).

Places in the queue are leased for 60 s here instead of 3 s. While they wait, these 1,000
callers re-ask about 1,800 times a second for a semaphore, 900 for a lock (a third of a core
of this process for the semaphore, with hiredis): on a CI machine running other suites beside
this one, some of them fell more than 3 s behind and, as documented, lost their places and
queued again at the back, so the order measured the machine's load. A place that lapses is
tested on its own
(``test_a_try_never_overtakes_a_queued_waiter_and_a_dead_ones_place_runs_out`` in
tests/core/test_lock_queue.py, ``test_a_queued_waiter_that_does_not_come_back_loses_its_place``
in tests/core/test_semaphore.py); here the order shows the hand-over itself.
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
from django_redis_locks.core import semaphore as semaphore_module
from django_redis_locks.core.connection.libraries import node_client
from django_redis_locks.core.protocol import lock_calls
from tests.harness.plugin import MakeCluster
from tests.harness.servers import RedisServer, connected_clients, probe_client, wait_until

WAITERS = 1000
THREADS = WAITERS // 2
TASKS = WAITERS - THREADS
#: The given client's pool size (redis-py 8's default; before, pools were unbounded); the
#: Backend's pools copy it.
POOL = 100
#: Library connections while they wait: the threads' pool (the wake-up listener's connection
#: comes from it) and the event loop's.
BOUND = 2 * POOL
#: Library connections to a Cluster master that serves none of the waiters' keys: the one
#: each of its two clients (the threads' and the event loop's) keeps there after reading the
#: slot map or INFO (the eviction check), and the wake-up listener's if its channel hashes
#: there.
OTHER_MASTER = 3


#: The waiters' lease in these tests (ms); see the module's docstring.
LEASE_MS = 60_000
#: The library's client's socket timeout (s), which is also how long a call waits for a free
#: connection of a full pool: 500 threads share 100 connections, and on a machine that runs
#: other suites beside this one a thread waited over 10 s for one (the semaphore variant, two
#: runs in four with two copies of this test beside four busy loops), which fails its acquire
#: as documented.
SOCKET_TIMEOUT = 30


@pytest.fixture(autouse=True)
def long_leases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lock_calls, "WAITER_LEASE_MS", LEASE_MS)  # read by Lock
    monkeypatch.setattr(semaphore_module, "WAITER_LEASE_MS", LEASE_MS)


def holder_ids(admin: redis.Redis, queue_key: str) -> list[str]:
    """The queued tokens' holder ids, first come first."""
    tokens = admin.zrange(queue_key, 0, -1)
    return [hashlib.sha1(str(t).encode()).hexdigest()[:16] for t in tokens]


class Waiters:
    """WAITERS callers of ``kind`` blocked on one held name of ``backend``: half of them
    threads, half tasks of one event loop run by a thread of its own."""

    def __init__(self, backend: Backend, kind: str) -> None:
        self.backend = backend
        self.kind = kind
        self.holder = self.make()
        assert self.holder.acquire()
        self.queue_key: str = self.holder._keys_for(backend).queue
        self.order: list[str] = []
        self.errors: list[BaseException] = []
        self.loop = asyncio.new_event_loop()
        self.loop_thread = threading.Thread(target=self.loop.run_forever, name="tasks")
        self.threads = [threading.Thread(target=self._in_thread) for _ in range(THREADS)]
        self.tasks: list[Any] = []

    def make(self) -> Lock | Semaphore:
        if self.kind == "lock":
            return Lock("hot", client=self.backend, timeout=60)
        return Semaphore("hot", 1, client=self.backend, timeout=60)

    def _got(self, primitive: Lock | Semaphore) -> None:
        assert primitive.holder_id is not None
        self.order.append(primitive.holder_id)  # list.append is atomic

    def _in_thread(self) -> None:
        try:
            primitive = self.make()
            assert primitive.acquire(timeout=120)
            self._got(primitive)
            primitive.release()
        except BaseException as error:
            self.errors.append(error)

    async def _in_task(self) -> None:
        try:
            primitive = self.make()
            assert await primitive.aacquire(timeout=120)
            self._got(primitive)
            await primitive.arelease()
        except BaseException as error:
            self.errors.append(error)

    def queue(self, admin: redis.Redis) -> None:
        """Start every caller; return once all are queued (``admin``: on the queue's server)."""
        self.loop_thread.start()
        self.tasks = [
            asyncio.run_coroutine_threadsafe(self._in_task(), self.loop) for _ in range(TASKS)
        ]
        for thread in self.threads:
            thread.start()
        wait_until(
            lambda: bool(self.errors) or admin.zcard(self.queue_key) == WAITERS,
            timeout=60,
            what=f"{WAITERS} callers to queue",
        )
        assert not self.errors, self.errors[:3]

    def release_and_join(self) -> float:
        """Release the holder, wait for every caller to pass; the seconds that took."""
        started = time.monotonic()
        self.holder.release()
        for thread in self.threads:
            thread.join(120)
        for task in self.tasks:
            task.result(120)
        assert not self.errors, self.errors[:3]
        return time.monotonic() - started

    def end_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.loop_thread.join(10)
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())  # closes its client
        self.loop.close()


def order_report(order: list[str], queued: list[str]) -> str:
    """Where the order in which callers got the hold left the queue's order: for the first
    callers out of place, their place in the queue and in the order."""
    lines = [
        f"{len(order)} got the hold, {len(queued)} queued,"
        f" {len(set(order) - set(queued))} not queued"
    ]
    where = {holder: index for index, holder in enumerate(queued)}
    for index, holder in enumerate(order):
        if index >= len(queued) or queued[index] != holder:
            lines.append(f"#{index} in the order: {holder}, #{where.get(holder)} in the queue")
            if len(lines) > 8:
                break
    return "\n".join(lines)


def sample(count: Callable[[], int]) -> list[int]:
    """``count()`` every 0.1 s for 1.5 s: past a re-check of every waiter (1 s for locks, 0.5 s
    for semaphores)."""
    samples = []
    for _ in range(15):
        samples.append(count())
        time.sleep(0.1)
    return samples


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_1000_blocked_callers_share_bounded_connections_and_pass_in_order(
    make_server: Callable[..., RedisServer], namespace: str, kind: str
) -> None:
    server = make_server()
    admin = probe_client(server, timeout=10)
    baseline = connected_clients(admin)  # the probe itself
    client = redis.Redis.from_url(server.url, socket_timeout=SOCKET_TIMEOUT, max_connections=POOL)
    backend = Backend(client, namespace=namespace)
    waiters = Waiters(backend, kind)
    try:
        waiters.queue(admin)
        samples = sample(lambda: connected_clients(admin) - baseline)
        peak = max(samples)
        print(f"\n{WAITERS} {kind} waiters ({THREADS} threads, {TASKS} tasks): {peak} connections")
        assert peak <= BOUND + 1, samples  # + 1: a connection closing while one opens
        queued = holder_ids(admin, waiters.queue_key)
        assert len(queued) == WAITERS
        print(f"all {WAITERS} through in {waiters.release_and_join():.1f} s")
        # one after another, first come first served
        assert waiters.order == queued, order_report(waiters.order, queued)
    finally:
        waiters.end_loop()

    assert connected_clients(admin) - baseline <= POOL + 1  # the loop's connections are closed
    backend.close()
    client.close()
    # Only the wake-up listener may still be connected (it stops after 30 s without waiters).
    wait_until(
        lambda: connected_clients(admin) - baseline <= 1, timeout=10, what="connections closed"
    )
    admin.close()


@pytest.mark.chaos  # a 3-master Cluster with 1,000 callers: about 20 s, in the chaos tier's CI step
@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_1000_blocked_callers_on_a_cluster_share_bounded_connections_and_pass_in_order(
    make_cluster: MakeCluster, namespace: str, kind: str
) -> None:
    """The same on a Cluster of three masters. The name's keys live on one master; there the
    bound is the same: the threads' node pool (the wake-up listener's connection included
    when its channel hashes there) and the event loop's client, which lets as many commands
    be in flight as a node pool holds. The other masters see only what a cluster client
    keeps on every node (see OTHER_MASTER), never a pool's worth."""
    cluster = make_cluster(3)
    admins = {(node.host, node.port): probe_client(node, timeout=10) for node in cluster.nodes}
    client = cluster.library_client(socket_timeout=SOCKET_TIMEOUT, max_connections=POOL)
    # (the given client, which the library does not use, read the slot map when made)
    baselines = {address: connected_clients(admin) for address, admin in admins.items()}
    backend = Backend(client, namespace=namespace)

    def library_connections() -> dict[tuple[str, int], int]:
        return {address: connected_clients(a) - baselines[address] for address, a in admins.items()}

    waiters = Waiters(backend, kind)
    node = backend.client.get_node_from_key(waiters.queue_key)
    hot = (node.host, int(node.port))
    try:
        waiters.queue(admins[hot])
        samples = sample(lambda: library_connections()[hot])
        others = library_connections()
        others.pop(hot)
        peak = max(samples)
        print(
            f"\n{WAITERS} {kind} waiters on a cluster ({THREADS} threads, {TASKS} tasks): "
            f"{peak} connections to the name's master, {sorted(others.values())} to the others"
        )
        assert peak <= BOUND + 1, samples  # + 1: a connection closing while one opens
        assert all(count <= OTHER_MASTER for count in others.values()), others
        queued = holder_ids(admins[hot], waiters.queue_key)
        assert len(queued) == WAITERS
        print(f"all {WAITERS} through in {waiters.release_and_join():.1f} s")
        # one after another, first come first served
        assert waiters.order == queued, order_report(waiters.order, queued)
    finally:
        waiters.end_loop()

    assert library_connections()[hot] <= POOL + 1  # the loop's connections are closed
    backend.close()
    client.close()
    # Only the wake-up listener may still be connected (it stops after 30 s without waiters).
    wait_until(
        lambda: sum(library_connections().values()) <= 1,
        timeout=10,
        what="connections closed",
    )
    for admin in admins.values():
        admin.close()


@pytest.mark.parametrize("topology", ["server", pytest.param("cluster", marks=pytest.mark.cluster)])
def test_a_full_pool_makes_callers_wait_for_a_connection_not_fail(
    request: pytest.FixtureRequest, namespace: str, topology: str
) -> None:
    """Regression: the Backend's pools raised "Too many connections" (LockBackendError) as soon
    as more calls than the pool's size ran at once; 900 of 1,000 blocked asyncio callers
    failed that way with redis-py's default pool of 100. On a Cluster each node has a pool
    of that size, and names here live on every master."""
    client: Any
    if topology == "server":
        url = request.getfixturevalue("redis_server").url
        client = redis.Redis.from_url(url, socket_timeout=5, max_connections=3)
    else:
        cluster = request.getfixturevalue("redis_cluster")
        client = cluster.library_client(socket_timeout=5, max_connections=3)
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
            try:
                async with Lock(name, client=backend, timeout=5):
                    pass
            except BaseException as error:
                errors.append(error)

        await asyncio.gather(*(acycle(f"async-{i}") for i in range(60)))

    asyncio.run(in_tasks())
    assert not errors, errors[:3]
    if topology == "server":
        pools = [backend.client.connection_pool]
    else:
        pools = [node_client(node).connection_pool for node in backend.client.get_nodes()]
    assert all(len(pool._connections) <= 3 for pool in pools), [len(p._connections) for p in pools]
    backend.close()
    client.close()

"""Every lock script on a 3-master Redis Cluster: one slot per lock, no CROSSSLOT."""

from __future__ import annotations

import asyncio
import random
import string
import threading
import time
from collections import Counter

import pytest
from redis.crc import key_slot

from django_redis_locks import Lock, Semaphore
from django_redis_locks.core import Backend
from django_redis_locks.inspection import get_lock, get_semaphore, list_locks, list_semaphores
from tests.harness.servers import hub_has_waiter, wait_until

pytestmark = pytest.mark.cluster

ALPHABET = string.ascii_letters + string.digits + ":{}-_/ é中"


def random_names(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return list(
        {"".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 40))) for _ in range(count)}
    )


@pytest.fixture
def cluster_backend(redis_cluster, namespace):
    client = redis_cluster.client(socket_timeout=5)
    yield Backend(client, namespace=namespace)
    client.close()


def test_every_key_of_1000_random_names_shares_one_slot(cluster_backend: Backend) -> None:
    """The keys of a lock, of a semaphore of the same name and of their registry bucket all
    hash to one slot, whatever the name; the names spread over every master."""
    nodes: Counter[str] = Counter()
    client = cluster_backend.client
    for name in random_names(1000, seed=1):
        keys = cluster_backend.keys.lock(name)
        sem_keys = cluster_backend.keys.semaphore(name)
        every_key = (keys.lock, keys.queue, keys.waiters, *sem_keys.state)
        registry = (keys.registry.names, keys.registry.expiry)
        assert len({key_slot(k.encode()) for k in every_key + registry}) == 1, name
        nodes[client.get_node_from_key(keys.lock).name] += 1
    assert len(nodes) == 3, f"names did not spread over the masters: {nodes}"


def test_every_script_runs_on_the_node_of_200_random_names(cluster_backend: Backend) -> None:
    """Every script (lock, semaphore, inspection, listing) on the node of each name."""
    names = random_names(200, seed=1)
    nodes: Counter[str] = Counter()
    client = cluster_backend.client
    for name in names:
        nodes[client.get_node_from_key(cluster_backend.keys.lock(name).lock).name] += 1
        lock = Lock(name, client=cluster_backend, timeout=5)
        contender = Lock(name, client=cluster_backend, timeout=5, blocking=False)
        assert lock.acquire()
        assert not contender.acquire()  # contended path (sets the wait flag)
        assert lock.locked() and lock.owned()
        assert lock.extend(5) > 5
        assert lock.extend(2, replace=True) == 2
        assert lock.ensure_held() > 0
        # The inspection scripts (lock_inspect, registry_page) on the name's own node.
        info = get_lock(name, client=cluster_backend)
        assert info is not None and info.holder_id == lock.holder_id and info.fence == lock.fence
        listed = list_locks(name, client=cluster_backend, count=1000).items
        assert lock.holder_id in {i.holder_id for i in listed if i.name == name}
        lock.release()  # publishes: a waiter flag exists
        assert not lock.locked()
        first, second = (Semaphore(name, 2, client=cluster_backend, timeout=5) for _ in "ab")
        third = Semaphore(name, 2, client=cluster_backend, timeout=5, blocking=False)
        assert first.acquire() and second.acquire()
        assert not third.acquire()
        assert first.count() == 2 and first.held()
        assert first.refresh() == 5
        assert {h.holder_id for h in first.holders()} == {first.holder_id, second.holder_id}
        described = get_semaphore(name, client=cluster_backend)  # sem_inspect
        assert described is not None and (described.limit, described.count) == (2, 2)
        listed_sems = list_semaphores(name, client=cluster_backend, count=1000).items
        assert any(i.name == name and i.count == 2 for i in listed_sems)
        first.release()
        second.release()
        assert first.count() == 0
    assert len(nodes) == 3, f"names did not spread over the masters: {nodes}"


def test_blocking_waiter_is_woken_on_cluster(cluster_backend: Backend) -> None:
    holder = Lock("cluster-handoff", client=cluster_backend, timeout=10)
    result: list[float] = []
    held = threading.Event()

    def hold_then_release() -> None:
        holder.acquire()
        held.set()
        member = holder._keys_for(cluster_backend).member
        wait_until(lambda: hub_has_waiter(cluster_backend, member), timeout=5, what="waiter")
        result.append(time.perf_counter())
        holder.release()

    thread = threading.Thread(target=hold_then_release)
    thread.start()
    held.wait(5)
    waiter = Lock("cluster-handoff", client=cluster_backend, timeout=10)
    assert waiter.acquire(timeout=10)
    latency = time.perf_counter() - result[0]
    waiter.release()
    thread.join()
    assert latency < 0.5


def test_auto_renew_batches_across_nodes(cluster_backend: Backend) -> None:
    locks = [
        Lock(n, client=cluster_backend, timeout=0.5, auto_renew=True) for n in random_names(30, 2)
    ]
    for lock in locks:
        lock.acquire()
    time.sleep(1.2)  # more than two TTLs of work
    for lock in locks:
        assert lock.ensure_held() > 0
        lock.release()


def test_async_cluster_client(redis_cluster, namespace: str) -> None:
    async def main() -> list[int | None]:
        client = redis_cluster.async_client(socket_timeout=5)
        backend = Backend(client, namespace=namespace)
        fences = []
        for name in random_names(50, 3):
            lock = Lock(name, client=backend, timeout=5)
            async with lock:
                assert await lock.aowned()
                await lock.aextend(1)
                fences.append(lock.fence)
        await client.aclose()
        backend.client.close()
        return fences

    assert len(asyncio.run(main())) == 50

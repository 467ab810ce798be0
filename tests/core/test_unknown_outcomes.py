"""An acquire whose outcome is unknown is undone as soon as Redis answers again.

A partition right after an acquire reached Redis: the script ran (the name is taken), the
reply never came, and the network stays cut for a while. The library keeps the unknown token
and releases it, token-checked, once Redis can be reached: the name is free again about a
second after the partition heals, not after the hold's 30 s TTL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_redis_locks import Lock, LockBackendError, Semaphore
from django_redis_locks.core import Backend
from django_redis_locks.core.runtime import driver
from tests.harness.servers import RedisCluster, wait_until
from tests.helpers import Proxied, is_held, proxied_backend

TTL = 30.0
SOCKET_TIMEOUT = 0.5
PARTITION = 2.0  # seconds the network stays cut after the acquire
UNDONE_WITHIN = 2.0  # after the partition healed: back-off (<= 1 s) + a socket timeout


@pytest.fixture
def cut(make_server: Any) -> Iterator[Proxied]:
    with proxied_backend(make_server(), namespace="cut", socket_timeout=SOCKET_TIMEOUT) as cut:
        yield cut


def partitioned_acquire(
    cut: Proxied, acquire: Callable[[], Any], taken: Callable[[], bool]
) -> float:
    """Acquire while the network gets cut; return the seconds from the heal until the name
    was free again (or fail)."""
    with cut.proxy.partition(after_next_reply=True):
        with pytest.raises(LockBackendError):
            acquire()
        assert taken(), "the acquire did not reach Redis"
        time.sleep(PARTITION)  # the network stays cut (time passing is the scenario)
        assert taken(), "undone while Redis could not be reached?"
    healed = time.monotonic()
    wait_until(lambda: not taken(), timeout=UNDONE_WITHIN + 3, what="the unknown grant undone")
    return time.monotonic() - healed


@pytest.mark.parametrize("blocking", [False, True], ids=["try", "blocking"])
def test_a_lock_acquired_during_a_partition_is_released_when_it_heals(
    cut: Proxied, blocking: bool
) -> None:
    lock = Lock("partitioned", client=cut.backend, timeout=TTL)
    key = lock._keys_for(cut.backend).lock
    undone = partitioned_acquire(
        cut, lambda: lock.acquire(blocking=blocking), lambda: is_held(cut.direct, key)
    )
    print(f"unknown lock grant undone {undone:.2f} s after the partition healed (TTL {TTL:g} s)")
    assert undone < UNDONE_WITHIN
    assert lock.acquire(blocking=False)  # and the caller can simply try again
    lock.release()


def test_a_clean_up_that_cannot_reach_redis_logs_as_a_reclaim_not_a_renewal(
    cut: Proxied, caplog: pytest.LogCaptureFixture
) -> None:
    """The failed acquire's clean-up is what finds Redis unreachable (nothing is renewed in
    this process): its log lines name that phase, not "renew"."""
    caplog.set_level(logging.WARNING, logger="django_redis_locks")
    lock = Lock("partitioned-log", client=cut.backend, timeout=TTL)
    key = lock._keys_for(cut.backend).lock
    partitioned_acquire(cut, lambda: lock.acquire(blocking=False), lambda: is_held(cut.direct, key))

    def lines() -> list[str]:
        found = [record.getMessage() for record in caplog.records]
        return [line for line in found if "cannot be reached" in line or "answers again" in line]

    # It stops answering, then answers again (logged just after the clean-up's reply).
    wait_until(lambda: len(lines()) == 2, timeout=5, what="both log lines")
    assert all(line.startswith("reclaim: ") for line in lines()), lines()
    # And the lane is named by its server, not by the client's repr.
    assert f"reclaim: {cut.proxy.url} cannot be reached" in lines()[0], lines()


def test_a_semaphore_slot_taken_during_a_partition_is_given_back_when_it_heals(
    cut: Proxied,
) -> None:
    semaphore = Semaphore("partitioned", 1, client=cut.backend, timeout=TTL)
    holders = semaphore._keys_for(cut.backend).holders
    undone = partitioned_acquire(
        cut, lambda: semaphore.acquire(blocking=False), lambda: cut.direct.zcard(holders) > 0
    )
    print(f"unknown semaphore slot given back {undone:.2f} s after the partition healed")
    assert undone < UNDONE_WITHIN
    assert semaphore.acquire(blocking=False)
    semaphore.release()


def test_an_asyncio_acquire_during_a_partition_is_undone_when_it_heals(cut: Proxied) -> None:
    lock = Lock("apartitioned", client=cut.backend, timeout=TTL)
    key = lock._keys_for(cut.backend).lock

    async def scenario() -> None:
        assert await lock.aacquire()  # this loop's connection is up before the cut
        await lock.arelease()
        with cut.proxy.partition(after_next_reply=True):
            with pytest.raises(LockBackendError):
                await lock.aacquire(blocking=False)
            assert is_held(cut.direct, key), "the acquire did not reach Redis"
            await asyncio.sleep(PARTITION)
        await cut.backend.aclose()

    asyncio.run(scenario())
    healed = time.monotonic()
    wait_until(lambda: not is_held(cut.direct, key), timeout=UNDONE_WITHIN + 3, what="undone")
    assert time.monotonic() - healed < UNDONE_WITHIN


@pytest.mark.cluster
def test_a_cancelled_replicated_acquire_on_a_cluster_leaves_no_hold(
    redis_cluster: RedisCluster, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncio on a Cluster runs an acquire with wait_for_replicas in a worker thread. When
    the caller is cancelled while that thread is on its way (here: slowed by 0.1 s, as a
    loaded process would), the clean-up must come after the acquire, not before it."""
    run_many = driver.run_many  # type: ignore[attr-defined]

    def slow_run_many(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.1)  # the worker thread is slow to send (GIL, load)
        return run_many(*args, **kwargs)

    monkeypatch.setattr(driver, "run_many", slow_run_many)

    async def scenario() -> list[bool]:
        client = redis_cluster.async_client(socket_timeout=5)
        backend = Backend(client, namespace=namespace, replica_wait_timeout=0.2)
        left = []
        try:
            for i in range(3):
                lock = Lock(f"replicated-{i}", client=backend, timeout=TTL, wait_for_replicas=1)
                task = asyncio.create_task(lock.aacquire(blocking=False))
                await asyncio.sleep(0.05)  # its thread is on its way...
                task.cancel()  # ...when it is cancelled
                with pytest.raises(asyncio.CancelledError):
                    await task
                await asyncio.sleep(0.5)  # (long enough for the thread to be done)
                left.append(await lock.alocked())
        finally:
            await client.aclose()
            backend.close()
        return left

    assert asyncio.run(scenario()) == [False] * 3

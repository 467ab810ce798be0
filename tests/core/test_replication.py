"""wait_for_replicas: an acquire counts only once replicas acknowledged it (WAIT)."""

from __future__ import annotations

import asyncio

import pytest
import redis

from django_redis_locks import InvalidArgument, InvalidArgumentType, Lock, LockNotReplicated
from django_redis_locks.core import Backend
from tests.helpers import is_held


@pytest.fixture
def primary_with_replica(make_server, make_replica):
    primary = make_server()
    replica = make_replica(primary)
    client = primary.client(socket_timeout=5)
    yield primary, replica, client
    client.close()


@pytest.mark.parametrize("replicas", [1, "majority"])
def test_acquire_succeeds_with_a_live_replica(primary_with_replica, replicas) -> None:
    _, replica, client = primary_with_replica
    backend = Backend(client, namespace="repl", replica_wait_timeout=2)
    lock = Lock("replicated", client=backend, timeout=10, wait_for_replicas=replicas)
    assert lock.acquire()
    key = lock._keys_for(backend).lock
    with replica.client(socket_timeout=5) as replica_client:
        # WAIT returned only after the replica had the write, so it is there already.
        assert replica_client.hget(key, "token") == client.hget(key, "token")
    lock.release()


def test_acquire_fails_and_leaves_no_lock_with_the_replica_paused(primary_with_replica) -> None:
    _, replica, client = primary_with_replica
    backend = Backend(client, namespace="repl", replica_wait_timeout=0.3)
    lock = Lock("unreplicated", client=backend, timeout=10, wait_for_replicas="majority")
    replica.pause()
    try:
        with pytest.raises(LockNotReplicated, match="0 of 1 replicas"):
            lock.acquire()
        assert not is_held(client, lock._keys_for(backend).lock)
        assert not lock.locked()
        assert lock.fence is None
    finally:
        replica.resume()
    assert lock.acquire()  # and works again once the replica is back
    lock.release()


def test_async_acquire_fails_with_the_replica_paused(primary_with_replica) -> None:
    primary, replica, _ = primary_with_replica

    async def main() -> bool:
        aclient = redis.asyncio.Redis(host=primary.host, port=primary.port, socket_timeout=5)
        backend = Backend(aclient, namespace="repl", replica_wait_timeout=0.3)
        lock = Lock("unreplicated-async", client=backend, timeout=10, wait_for_replicas=1)
        try:
            with pytest.raises(LockNotReplicated):
                await lock.aacquire()
            return await lock.alocked()
        finally:
            await aclient.aclose()
            backend.client.close()

    replica.pause()
    try:
        assert asyncio.run(main()) is False
    finally:
        replica.resume()


def test_majority_without_replicas_needs_no_acknowledgement(backend: Backend) -> None:
    lock = Lock("alone", client=backend, timeout=5, wait_for_replicas="majority")
    assert lock.acquire()
    lock.release()


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (-1, InvalidArgument),
        (True, InvalidArgumentType),
        ("all", InvalidArgumentType),
        (1.5, InvalidArgumentType),
    ],
)
def test_bad_replica_counts_are_refused(backend: Backend, value, error) -> None:
    with pytest.raises(error, match="wait_for_replicas"):
        Lock("x", client=backend, wait_for_replicas=value)

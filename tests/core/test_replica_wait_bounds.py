"""A WAIT for replicas ends within the client's socket timeout: a slow replica is reported as
LockNotReplicated (and the acquire undone), never as a socket timeout of the library's call.

The default ``replica_wait_timeout`` (1 s) is longer than a 0.5 s socket timeout; the
replica is paused (SIGSTOP), so it acknowledges nothing and the WAIT runs its full course.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from django_redis_locks import Lock, LockNotReplicated
from django_redis_locks.core import Backend
from django_redis_locks.core.connection.backend import DEFAULT_REPLICA_WAIT_TIMEOUT
from tests.harness.clients import async_from_url, sync_from_url
from tests.harness.plugin import MakeReplica, MakeServer
from tests.harness.servers import RedisServer
from tests.helpers import is_held

SOCKET_TIMEOUT = 0.5


@pytest.fixture
def paused_replica(
    make_server: MakeServer, make_replica: MakeReplica
) -> Iterator[tuple[RedisServer, Any]]:
    primary = make_server()
    replica = make_replica(primary)
    with primary.client(socket_timeout=5) as direct:
        replica.pause()
        try:
            yield primary, direct
        finally:
            replica.resume()


def test_a_slow_replica_is_reported_as_not_replicated_within_a_short_socket_timeout(
    paused_replica: tuple[RedisServer, Any], namespace: str
) -> None:
    primary, direct = paused_replica
    assert DEFAULT_REPLICA_WAIT_TIMEOUT > SOCKET_TIMEOUT  # the combination under test
    client = sync_from_url(primary.url, socket_timeout=SOCKET_TIMEOUT)
    backend = Backend(client, namespace=namespace)
    lock = Lock("slow-replica", client=backend, timeout=10, wait_for_replicas=1)
    try:
        with pytest.raises(LockNotReplicated, match="0 of 1 replicas") as raised:
            lock.acquire(blocking=False)
        # The WAIT was shortened below the socket timeout, and the message says so.
        assert backend.replica_wait_timeout < SOCKET_TIMEOUT
        assert f"within {backend.replica_wait_timeout} s" in str(raised.value)
        assert not is_held(direct, lock._keys_for(backend).lock)
        assert lock.holder_id is None
    finally:
        backend.close()
        client.close()


def test_the_asyncio_twin_too(paused_replica: tuple[RedisServer, Any], namespace: str) -> None:
    primary, direct = paused_replica

    async def main() -> None:
        aclient = async_from_url(primary.url, socket_timeout=SOCKET_TIMEOUT)
        backend = Backend(aclient, namespace=namespace)
        lock = Lock("slow-replica-async", client=backend, timeout=10, wait_for_replicas=1)
        try:
            with pytest.raises(LockNotReplicated, match="0 of 1 replicas"):
                await lock.aacquire(blocking=False)
            assert not is_held(direct, lock._keys_for(backend).lock)
        finally:
            await aclient.aclose()
            backend.close()

    asyncio.run(main())


def test_a_wait_through_a_client_made_elsewhere_is_bounded_too(
    paused_replica: tuple[RedisServer, Any], namespace: str
) -> None:
    """An asyncio client from ``async_client_factory`` (its socket timeout unknown when the
    Backend is made) with a shorter socket timeout than the sync client's."""
    primary, direct = paused_replica

    async def main() -> None:
        client = sync_from_url(primary.url, socket_timeout=5)
        made: list[Any] = []

        def factory() -> Any:
            made.append(async_from_url(primary.url, socket_timeout=SOCKET_TIMEOUT))
            return made[-1]

        backend = Backend(client, namespace=namespace, async_client_factory=factory)
        lock = Lock("slow-replica-factory", client=backend, timeout=10, wait_for_replicas=1)
        try:
            with pytest.raises(LockNotReplicated, match="0 of 1 replicas"):
                await lock.aacquire(blocking=False)
            assert not is_held(direct, lock._keys_for(backend).lock)
        finally:
            await backend.aclose()
            backend.close()
            client.close()

    asyncio.run(main())

"""The clients users hand over: redis-py's of every declared version (a pool of 2**31
connections is redis-py's default before 8), and valkey-py's, sync and asyncio."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import valkey
import valkey.asyncio

from django_redis_locks import InvalidArgumentType, Lock, Semaphore
from django_redis_locks.core import Backend
from tests.harness.acl import unrestricted_url
from tests.harness.servers import wait_until
from tests.helpers import seconds_to_wake_a_waiter

ROOT = Path(__file__).resolve().parents[2]

UNBOUNDED_POOL = textwrap.dedent(
    """
    import asyncio, resource, sys
    import redis, redis.asyncio
    from django_redis_locks import Lock
    from django_redis_locks.core import Backend

    # A pool as large as redis-py's default before 8; 2 GiB of memory at most, so that a
    # pool that tries to fill a queue with 2**31 slots fails fast instead of eating the host.
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    url, namespace = sys.argv[1:3]
    pool = redis.ConnectionPool.from_url(url, max_connections=2**31, socket_timeout=5)
    client = redis.Redis(connection_pool=pool)
    backend = Backend(client, namespace=namespace)
    with Lock("unbounded", client=backend, timeout=5) as lock:
        assert lock.fence
    async def run():
        async with Lock("unbounded", client=backend, timeout=5) as lock:
            return lock.fence
    assert asyncio.run(run())
    async_pool = redis.asyncio.ConnectionPool.from_url(url, max_connections=2**31)
    async def from_async():
        async_client = redis.asyncio.Redis(connection_pool=async_pool)
        async_backend = Backend(async_client, namespace=namespace)
        async with Lock("unbounded", client=async_backend, timeout=5) as lock:
            fence = lock.fence
        async_backend.close()
        await async_client.aclose()
        return fence
    assert asyncio.run(from_async())
    backend.close()
    print("ok")
    """
)


def test_a_client_on_an_unbounded_pool_works(redis_server: Any, namespace: str) -> None:
    """redis-py before 8 gives a pool 2**31 connections unless told otherwise (Django's and
    django-redis's pools among them): the library's own pools must not try to pre-fill that."""
    done = subprocess.run(
        [sys.executable, "-c", UNBOUNDED_POOL, redis_server.url, namespace],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.fixture
def valkey_client(redis_server: Any) -> Any:
    with valkey.Valkey.from_url(redis_server.url, socket_timeout=5) as client:
        yield client


def _flush_scripts(server: Any) -> None:
    """SCRIPT FLUSH as the unrestricted user (the library's ACL user may not)."""
    with valkey.Valkey.from_url(unrestricted_url(server.url), socket_timeout=5) as admin:
        admin.script_flush()


def test_valkey_py_clients_take_locks_and_slots_and_are_woken(
    valkey_client: Any, redis_server: Any, namespace: str
) -> None:
    backend = Backend(valkey_client, namespace=namespace)
    try:
        _flush_scripts(redis_server)  # the scripts are loaded on the first NOSCRIPT
        assert seconds_to_wake_a_waiter(backend, "valkey:job") < 1.0
        started = time.monotonic()

        with Semaphore("valkey:pool", 1, client=backend, timeout=10):
            assert not Semaphore("valkey:pool", 1, client=backend, blocking=False).acquire()

        renewed = Lock("valkey:renewed", client=backend, timeout=1, auto_renew=True)
        with renewed:
            wait_until(
                lambda: renewed.ensure_held() > 0 and time.monotonic() - started > 2.5,
                timeout=10,
                what="a 1 s hold renewed past 2.5 s",
            )
    finally:
        backend.close()


def test_an_asyncio_valkey_client_works_alone_and_gives_a_sync_twin(
    redis_server: Any, namespace: str
) -> None:
    async def run() -> int:
        client = valkey.asyncio.Valkey.from_url(redis_server.url, socket_timeout=5)
        backend = Backend(client, namespace=namespace)
        try:
            _flush_scripts(redis_server)
            async with Lock("valkey:async", client=backend, timeout=1, auto_renew=True) as lock:
                await asyncio.sleep(1.5)  # (past the TTL: the renewer runs on the sync twin)
                assert await lock.aensure_held() > 0
                return lock.fence or 0
        finally:
            backend.close()
            await client.aclose()

    assert asyncio.run(run()) > 0


def test_clients_of_other_libraries_are_refused_by_name() -> None:
    class Lookalike:
        def evalsha(self, *args: Any) -> None: ...

    with pytest.raises(InvalidArgumentType, match="redis-py or valkey-py client"):
        Backend(Lookalike())
    with pytest.raises(InvalidArgumentType, match="redis-py or valkey-py client"):
        Lock("x", client=Lookalike())


def test_redis_py_and_valkey_py_errors_both_become_lock_backend_errors(namespace: str) -> None:
    from django_redis_locks import LockBackendError

    for client in (
        redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1),
        valkey.Valkey(host="127.0.0.1", port=1, socket_connect_timeout=1),
    ):
        with client, pytest.raises(LockBackendError):
            Lock("down", client=Backend(client, namespace=namespace)).acquire()

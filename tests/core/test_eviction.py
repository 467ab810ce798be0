"""A lock server that may evict keys is reported on first use in a process, once: right
after the first call Redis answered, in the caller's own flow (no thread, no extra
connection)."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis

from django_redis_locks.core import Backend, Lock, Semaphore
from django_redis_locks.core.connection.eviction import eviction_risk, policy_message
from tests.harness.plugin import MakeServer

EVICTING = ["allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-ttl"]


def _backend(server: object, namespace: str) -> Backend:
    return Backend(redis.Redis.from_url(server.url, socket_timeout=5), namespace=namespace)  # type: ignore[attr-defined]


@pytest.mark.parametrize("policy", EVICTING)
def test_first_use_warns_once_when_the_server_may_evict_lock_keys(
    make_server: MakeServer, namespace: str, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = make_server(extra_args=["--maxmemory", "64mb", "--maxmemory-policy", policy])
    backend = _backend(server, namespace)
    caplog.set_level(logging.WARNING, logger="django_redis_locks.core.connection.eviction")
    with Lock("nightly", client=backend, timeout=5):
        pass
    with Semaphore("exports", 2, client=backend, timeout=5):
        pass

    async def asyncio_use() -> None:
        async with Lock("nightly", client=backend, timeout=5):
            pass

    asyncio.run(asyncio_use())
    warnings = [
        r for r in caplog.records if r.name == "django_redis_locks.core.connection.eviction"
    ]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    message = warnings[0].getMessage()
    assert warnings[0].levelno == logging.WARNING
    assert f"maxmemory-policy {policy}" in message
    assert "Set maxmemory-policy noeviction" in message


@pytest.mark.parametrize(
    "extra_args",
    [
        [],
        ["--maxmemory", "64mb", "--maxmemory-policy", "noeviction"],
        ["--maxmemory-policy", "allkeys-lru"],
    ],
    ids=["default", "noeviction", "no-maxmemory"],
)
def test_no_warning_when_nothing_can_be_evicted(
    make_server: MakeServer, namespace: str, extra_args: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    server = make_server(extra_args=extra_args)
    backend = _backend(server, namespace)
    caplog.set_level(logging.INFO, logger="django_redis_locks.core.connection.eviction")
    with Lock("nightly", client=backend, timeout=5):
        pass
    assert [r.getMessage() for r in caplog.records if r.name.endswith("eviction")] == []
    assert eviction_risk(backend.client) is None


@pytest.mark.cluster
def test_the_message_names_the_setting_and_the_cluster_shape_is_read(
    redis_cluster: object,
) -> None:
    """INFO on a Cluster client answers per node: each master is read."""
    message = policy_message("volatile-lru", 1024)
    assert message is not None and "maxmemory-policy noeviction" in message
    assert policy_message("volatile-lru", 0) is None
    client = redis.RedisCluster.from_url(redis_cluster.url)  # type: ignore[attr-defined]
    try:
        assert eviction_risk(client) is None
    finally:
        client.close()


def test_an_asyncio_first_use_checks_too(
    make_server: MakeServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = make_server(extra_args=["--maxmemory", "64mb", "--maxmemory-policy", "volatile-lfu"])
    backend = _backend(server, namespace)
    caplog.set_level(logging.WARNING, logger="django_redis_locks.core.connection.eviction")

    async def use() -> None:
        async with Semaphore("exports", 2, client=backend, timeout=5):
            pass

    asyncio.run(use())
    [warning] = [
        r for r in caplog.records if r.name == "django_redis_locks.core.connection.eviction"
    ]
    assert "maxmemory-policy volatile-lfu" in warning.getMessage()

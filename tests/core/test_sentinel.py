"""Locks on a Sentinel-managed primary: bounded calls, no late replies, every documented
Django configuration (sync and asyncio). Failover itself is chaos scenario 12."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.test import override_settings
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from django_redis_locks import Lock, Semaphore
from django_redis_locks.connection import get_backend, reset
from django_redis_locks.core import Backend, LockBackendError
from tests.harness.acl import library_user
from tests.harness.django_caches import ALIAS, KINDS, Kind, sentinel_settings
from tests.harness.plugin import check_acl_log
from tests.harness.sentinel import SentinelGroup

pytestmark = pytest.mark.sentinel

SOCKET_TIMEOUT = 0.5
SLACK = 0.5  # a loaded 2-core machine


@pytest.fixture(scope="module")
def group() -> Iterator[SentinelGroup]:
    """A primary, two replicas, three Sentinels that never fail over (down after 60 s): a
    paused primary here is a stalled one."""
    started = SentinelGroup(down_after_ms=60_000, acl_user=library_user()).start()
    yield started
    problem = check_acl_log(started.servers)
    started.stop()
    assert not problem, problem


def master_client(group: SentinelGroup, **kwargs: Any) -> redis.Redis:
    """The primary's client as redis-py's ``Sentinel.master_for`` makes it (logged in as the
    library's user in ACL mode)."""
    sentinel = Sentinel(group.sentinel_addresses, sentinel_kwargs=group.sentinel_kwargs())
    login = group.acl_user
    if login is not None:
        kwargs.update(username=login.name, password=login.password)
    client: redis.Redis = sentinel.master_for(
        group.service,
        socket_timeout=SOCKET_TIMEOUT,
        socket_connect_timeout=SOCKET_TIMEOUT,
        **kwargs,
    )
    return client


def test_a_call_on_a_stalled_primary_fails_within_one_socket_timeout(
    group: SentinelGroup, namespace: str
) -> None:
    """Regression: a Sentinel client was used with its own retry policy (here three retries
    with back-off, as a project may configure), so a lock call on a stalled primary took
    several socket timeouts and the back-offs between them."""
    client = master_client(group, retry=Retry(ExponentialBackoff(cap=10, base=1), 3))
    backend = Backend(client, namespace=namespace)
    lock = Lock("stalled", client=backend, timeout=5)
    assert lock.acquire(blocking=False)
    lock.release()
    primary = group.primary()
    primary.pause()
    try:
        started = time.monotonic()
        with pytest.raises(LockBackendError):
            lock.acquire(blocking=False)
        elapsed = time.monotonic() - started
    finally:
        primary.resume()
    assert elapsed <= SOCKET_TIMEOUT + SLACK, elapsed
    # The acquire that timed out ran once the primary resumed; it is undone as soon as the
    # primary answers again, and then the lock is free.
    deadline = time.monotonic() + 5
    while not lock.acquire(blocking=False):
        assert time.monotonic() < deadline, "the timed-out acquire was never undone"
        time.sleep(0.02)
    lock.release()
    backend.close()
    client.close()


def test_a_reply_that_came_too_late_is_never_read_by_the_next_call(
    group: SentinelGroup, namespace: str
) -> None:
    """Regression: redis-py's Sentinel-managed connections keep a connection whose reply
    timed out, and, with a retry policy that does not retry timeouts (the library's, or this
    one given by a project), the next call on it read that late reply as its own."""
    client = master_client(
        group, retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,))
    )
    backend = Backend(client, namespace=namespace)
    lock = Lock("late", client=backend, timeout=5)
    other = Lock("other", client=backend, timeout=5)
    assert lock.acquire(blocking=False)
    primary = group.primary()
    primary.pause()
    try:
        with pytest.raises(LockBackendError):
            other.acquire(blocking=False)  # its reply arrives once the primary runs again
    finally:
        primary.resume()
    # The next calls read their own replies: the first would otherwise read other's grant.
    assert lock.ensure_held() > 0
    assert lock.extend(5) > 5
    lock.release()
    assert not lock.locked()
    backend.close()
    client.close()


@pytest.mark.parametrize("kind", KINDS)
def test_every_documented_django_configuration_reaches_the_primary(
    group: SentinelGroup, namespace: str, kind: Kind
) -> None:
    """django-redis's SentinelClient, Django's RedisCache on a Sentinel pool, a
    CLIENT_FACTORY: locks and semaphores, sync and asyncio, through bounded clients."""
    login = group.acl_user.credentials() if group.acl_user is not None else ""
    project = sentinel_settings(
        kind,
        service=group.service,
        sentinels=group.sentinel_addresses,
        login=login,
        socket_timeout=SOCKET_TIMEOUT,
        namespace=namespace,
    )
    with override_settings(**project):
        reset()
        try:
            backend = get_backend(ALIAS)
            retry = backend.client.connection_pool.connection_kwargs["retry"]
            assert retry._retries == 1  # the library's bounded policy, not redis-py's
            with Lock("sync", using=ALIAS, timeout=5) as lock:
                assert lock.fence is not None
                with Semaphore("slots", 2, using=ALIAS, timeout=5):
                    assert Semaphore("slots", 2, using=ALIAS).count() == 1

            async def in_loop() -> int | None:
                async with Lock("async", using=ALIAS, timeout=5) as held:
                    return held.fence

            assert asyncio.run(in_loop()) is not None
            with group.primary().client() as admin:
                assert admin.exists(backend.keys.lock("sync").lock) == 1  # the hash stays
        finally:
            reset()

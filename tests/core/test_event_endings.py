"""Every acquire call and every hold ends in an event, however it ends: an acquire cancelled
or failed while it waited (``cancelled``, ``failed``, with how long it waited), and a release
whose reply never came (``released`` with a ``reason``: the owner gave the hold back, the
release goes on in the background), told once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
from prometheus_client import CollectorRegistry

from django_redis_locks.core import Backend, Lock, LockBackendError
from django_redis_locks.exporters import prometheus
from django_redis_locks.testing import CapturedHolds, capture_holds
from tests.harness.plugin import MakeServer


@pytest.fixture
def captured() -> Iterator[CapturedHolds]:
    with capture_holds() as captured:
        yield captured


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    registry = CollectorRegistry()
    prometheus.install(registry)
    yield registry
    prometheus.uninstall(registry)


def _of(captured: CapturedHolds, name: str) -> list[str]:
    return [event.event for event in captured.events if event.name == name]


def test_an_acquire_cancelled_while_it_waits_is_cancelled_with_its_wait(
    backend: Backend, captured: CapturedHolds, registry: CollectorRegistry
) -> None:
    holder = Lock("busy", client=backend, timeout=30, metric_name="busy")
    assert holder.acquire()

    async def wait() -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await Lock("busy", client=backend, timeout=30, metric_name="busy").aacquire()

    asyncio.run(wait())
    holder.release()
    (event,) = [e for e in captured.events if e.event == "cancelled"]
    assert event.name == "busy" and event.holder_id is None
    assert event.waited is not None and 0.25 <= event.waited < 5
    assert _of(captured, "busy") == ["acquired", "cancelled", "released"]
    labels = {"kind": "lock", "name": "busy", "outcome": "cancelled"}
    assert registry.get_sample_value("redis_locks_wait_seconds_count", labels) == 1


def test_an_acquire_that_redis_fails_is_failed(
    make_server: MakeServer, captured: CapturedHolds
) -> None:
    server = make_server()
    client = redis.Redis.from_url(server.url, socket_timeout=0.2)
    try:
        lock = Lock("unreachable", client=Backend(client, namespace="ends"), timeout=30)
        assert lock.acquire()
        lock.release()
        server.pause()
        try:
            with pytest.raises(LockBackendError):
                lock.acquire(blocking=False)
        finally:
            server.resume()
        assert _of(captured, "unreachable") == ["acquired", "released", "failed"]
        failed = captured.events[-1]
        assert failed.waited is not None and failed.waited >= 0.2
    finally:
        client.close()


def test_a_release_without_reply_gives_the_hold_back_once(
    make_server: MakeServer, captured: CapturedHolds, registry: CollectorRegistry
) -> None:
    server = make_server()
    client = redis.Redis.from_url(server.url, socket_timeout=0.2)
    try:
        lock = Lock("unanswered", client=Backend(client, namespace="ends"), timeout=30)
        assert lock.acquire()
        labels = {"kind": "lock", "name": "-"}
        assert registry.get_sample_value("redis_locks_holds", labels) == 1
        server.pause()
        try:
            with pytest.raises(LockBackendError):
                lock.release()
        finally:
            server.resume()
        (released,) = [e for e in captured.events if e.event == "released"]
        assert released.reason and "background" in released.reason
        assert released.held is not None and released.held >= 0.2
        assert registry.get_sample_value("redis_locks_holds", labels) == 0
        lock.release()  # the caller's retry: recognised as that release, told no more
        assert _of(captured, "unanswered") == ["acquired", "released"]
        assert registry.get_sample_value("redis_locks_holds", labels) == 0
    finally:
        client.close()


def test_an_acquire_refused_for_its_limit_is_failed(
    backend: Backend, captured: CapturedHolds
) -> None:
    """An error once the call asked (here SemaphoreLimitMismatch; LockNotReplicated takes the
    same path) ends it as failed: every call that asks ends in exactly one event."""
    from django_redis_locks.core import Semaphore, SemaphoreLimitMismatch

    holder = Semaphore("pool", 2, client=backend, timeout=30)
    assert holder.acquire()
    with pytest.raises(SemaphoreLimitMismatch):
        Semaphore("pool", 3, client=backend, timeout=30).acquire(blocking=False)
    holder.release()
    assert _of(captured, "pool") == ["acquired", "failed", "released"]

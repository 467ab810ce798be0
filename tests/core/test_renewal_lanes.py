"""Renewal is per server and never waits on callbacks; a release is never reported as a loss.

- A stalled server (SIGSTOPped, socket timeout 2 s) does not delay the renewals of a healthy
  one, nor a stalled Cluster node those of the other nodes.
- ``on_lost`` callbacks (and ``lost`` events) run on the callback thread: a slow one delays
  no renewal.
- A renewal in flight when the owner releases neither marks the hold lost nor reports it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import redis

from django_redis_locks import Lock, LockLost, Semaphore
from django_redis_locks.core import Backend
from django_redis_locks.core.events import Event, subscribe, unsubscribe
from django_redis_locks.core.protocol import lock_calls
from django_redis_locks.core.protocol.holder import new_token
from django_redis_locks.core.protocol.scripting import Call
from django_redis_locks.core.runtime.renewal import renewer
from tests.harness.servers import RedisCluster

TTL = 1.5
SOCKET_TIMEOUT = 2.0


def never_taken(lock: Lock, rival: Lock, seconds: float) -> float:
    """Try ``rival`` all along for ``seconds``; fail if it ever gets the lock. Returns the
    seconds watched."""
    started = time.monotonic()
    while (watched := time.monotonic() - started) < seconds:
        assert not rival.acquire(), f"{lock.name!r} was free after {watched:.2f} s"
        time.sleep(0.05)
    return watched


def test_a_stalled_server_does_not_delay_the_renewals_of_a_healthy_one(make_server) -> None:
    healthy, stalled = make_server(), make_server()
    with (
        healthy.client(socket_timeout=SOCKET_TIMEOUT) as good_client,
        stalled.client(socket_timeout=SOCKET_TIMEOUT) as bad_client,
        healthy.client(socket_timeout=5) as rival_client,
    ):
        good, bad = Backend(good_client, namespace="good"), Backend(bad_client, namespace="bad")
        kept = Lock("kept", client=good, timeout=TTL, auto_renew=True)
        doomed = Lock("doomed", client=bad, timeout=TTL, auto_renew=True)
        assert kept.acquire() and doomed.acquire()
        stalled.pause()
        try:
            rival = Lock("kept", client=Backend(rival_client, namespace="good"), blocking=False)
            watched = never_taken(kept, rival, 3 * TTL)
            assert kept.ensure_held() > 0
        finally:
            stalled.resume()
        assert watched >= 3 * TTL
        kept.release()
        with pytest.raises(LockLost):  # the stalled server's hold ran out meanwhile
            doomed.ensure_held()
        good.close()
        bad.close()


@pytest.mark.cluster
def test_a_stalled_cluster_node_does_not_delay_the_renewals_on_the_other_nodes() -> None:
    # A node timeout longer than the test: the paused node is stalled, not failed over.
    with RedisCluster(3, node_timeout_ms=60_000) as cluster:
        client = cluster.client(socket_timeout=SOCKET_TIMEOUT)
        backend = Backend(client, namespace="lanes")
        nodes: dict[str, Lock] = {}
        i = 0
        while len(nodes) < 3:  # one lock on each master
            lock = Lock(f"spread-{i}", client=backend, timeout=TTL, auto_renew=True)
            nodes.setdefault(client.get_node_from_key(lock._keys_for(backend).lock).name, lock)
            i += 1
        for lock in nodes.values():
            assert lock.acquire()
        (stalled_name, _), *healthy = list(nodes.items())
        stalled = next(n for n in cluster.nodes if f"{n.host}:{n.port}" == stalled_name)
        stalled.pause()
        try:
            rival_backend = Backend(cluster.client(socket_timeout=5), namespace="lanes")
            started = time.monotonic()
            while time.monotonic() - started < 3 * TTL:
                for _, lock in healthy:
                    rival = Lock(lock.name, client=rival_backend, blocking=False)
                    assert not rival.acquire(), f"{lock.name} was free on a healthy node"
                time.sleep(0.05)
            for _, lock in healthy:
                assert lock.ensure_held() > 0
                lock.release()
        finally:
            stalled.resume()
        rival_backend.close()
        backend.close()
        client.close()


def test_a_slow_on_lost_callback_does_not_delay_renewals(backend: Backend, redis_client) -> None:
    called = threading.Event()

    def slow_on_lost(lock: Any, reason: str) -> None:
        called.set()
        time.sleep(2.0)  # slow user code, e.g. a notification over the network

    vanishing = Lock(
        "vanishing", client=backend, timeout=0.6, auto_renew=True, on_lost=slow_on_lost
    )
    # kept's TTL outlasts a stalled thread on a loaded machine, not the callback's 2 s: a
    # renewal that waited for the callback would let it run out.
    kept = Lock("kept", client=backend, timeout=TTL, auto_renew=True)
    assert vanishing.acquire() and kept.acquire()
    redis_client.delete(vanishing._keys_for(backend).lock)
    assert called.wait(2), "the loss was not reported"
    rival = Lock("kept", client=backend, blocking=False)
    assert never_taken(kept, rival, 2.5) >= 2.5  # while the callback sleeps, and after
    kept.release()


def test_on_lost_and_lost_events_run_on_the_callback_thread(backend: Backend, redis_client) -> None:
    threads: list[str] = []
    events: list[Event] = []

    def listener(event: Event) -> None:
        if event.event == "lost" and event.name == "reported":  # (not an earlier test's)
            events.append(event)
            threads.append(threading.current_thread().name)

    subscribe(listener)
    try:
        lock = Lock(
            "reported",
            client=backend,
            timeout=0.6,
            auto_renew=True,
            on_lost=lambda lock, reason: threads.append(threading.current_thread().name),
        )
        assert lock.acquire()
        hold = lock._current_hold()
        assert hold is not None
        redis_client.delete(lock._keys_for(backend).lock)
        assert hold.lost_event.wait(2)
    finally:
        unsubscribe(listener)
    assert threads == ["drl-callbacks", "drl-callbacks"]
    assert [e.name for e in events] == ["reported"]


# -- item 5: a clean release is never reported as a loss ------------------------------------
class HeldBackRenewals(Backend):
    """A Backend whose renewal round trips wait at a gate: a renewal is "in flight" (sent
    by the renewer, not yet applied) for as long as the test wants."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()
        self.renewing = threading.Event()
        self.renewed = threading.Event()

    def run_many(self, calls: Sequence[Call]) -> list[Any]:
        renewal = any(call.script.name in ("lock_extend", "sem_refresh") for call in calls)
        if renewal:
            self.renewing.set()
            self.gate.wait(5)
        try:
            return super().run_many(calls)
        finally:
            if renewal:
                self.renewed.set()


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_renewal_in_flight_during_a_release_reports_no_loss(
    redis_server: Any, namespace: str, kind: str
) -> None:
    lost: list[str] = []
    events: list[str] = []

    def listener(event: Event) -> None:
        events.append(event.event)

    with redis.Redis.from_url(redis_server.url, socket_timeout=5) as client:
        backend = HeldBackRenewals(client, namespace=namespace)
        make: Callable[..., Lock | Semaphore] = (
            (lambda **kw: Lock("flight", **kw))
            if kind == "lock"
            else (lambda **kw: Semaphore("flight", 1, **kw))
        )
        primitive = make(
            client=backend,
            timeout=0.6,
            auto_renew=True,
            on_lost=lambda p, reason: lost.append(reason),
        )
        subscribe(listener)
        try:
            assert primitive.acquire()
            hold = primitive._current_hold()
            assert backend.renewing.wait(2), "no renewal was sent"
            primitive.release()  # while the renewal is in flight
            backend.gate.set()  # now it reaches Redis: the hold is gone
            assert backend.renewed.wait(2)
            time.sleep(0.3)  # (what a late loss report would need to arrive)
        finally:
            unsubscribe(listener)
        assert lost == []
        assert events == ["acquired", "released"]
        assert hold is not None and not hold.lost and not hold.lost_event.is_set()
        backend.close()


def test_a_watch_whose_window_has_passed_logs_a_release_not_a_negative_span(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """A lost hold's token is released once, even when no copy of its acquire can land any
    more: the debug line says so, not "watching for -4441.000 s"."""
    caplog.set_level(logging.DEBUG, logger="django_redis_locks.core.runtime.renewal")
    call = lock_calls.release_call(backend.keys.lock("watched"), new_token())
    renewer().watch(backend, call, time.monotonic() - 4441, 1.0, "the test's token", now=True)
    lines = [r.getMessage() for r in caplog.records if "the test's token" in r.getMessage()]
    assert lines == ["reclaim: releasing once: the test's token"]

"""The events' timings and names: how long an acquire waited, how long a hold was held, a wait
that ran out told apart from a refusal that did not wait, and the bounded name to aggregate
by. What metrics and traces are built on."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from django_redis_locks.core import Backend, Lock, LockLost, Semaphore
from django_redis_locks.core.errors import InvalidArgument, InvalidArgumentType
from django_redis_locks.core.registry import force_release
from django_redis_locks.testing import CapturedHolds, capture_holds
from tests.harness.servers import wait_until


@pytest.fixture
def captured() -> Iterator[CapturedHolds]:
    with capture_holds() as captured:
        yield captured


def _only(captured: CapturedHolds, event: str, name: str) -> Any:
    found = [e for e in captured.events if e.event == event and e.name == name]
    assert len(found) == 1, captured.events
    return found[0]


def test_an_acquire_says_how_long_it_waited_and_a_release_how_long_it_held(
    backend: Backend, captured: CapturedHolds
) -> None:
    holder = Lock("timed", client=backend, timeout=10)
    waiter = Lock("timed", client=backend, timeout=10)
    assert holder.acquire()
    ready = threading.Event()

    took: list[float] = []

    def wait() -> None:
        started = time.monotonic()
        ready.set()
        assert waiter.acquire(timeout=10)
        took.append(time.monotonic() - started)
        time.sleep(0.2)
        waiter.release()

    thread = threading.Thread(target=wait)
    thread.start()
    ready.wait(5)
    time.sleep(0.3)
    holder.release()
    thread.join(10)

    first, second = [e for e in captured.events if e.event == "acquired" and e.name == "timed"]
    assert first.waited is not None and 0 <= first.waited < 1.0
    assert second.waited is not None and 0.25 <= second.waited <= took[0]  # (from ready)
    released = [e for e in captured.events if e.event == "released" and e.name == "timed"]
    assert released[0].held is not None and released[0].held >= 0.3
    assert released[1].held is not None and 0.2 <= released[1].held < 5
    assert all(e.waited is None for e in released) and first.held is None
    assert first.handed_over is False and second.handed_over is True  # by the release


def test_a_wait_that_runs_out_is_timed_out_and_a_refusal_that_did_not_wait_contended(
    backend: Backend, captured: CapturedHolds
) -> None:
    holder = Lock("busy", client=backend, timeout=10)
    assert holder.acquire()
    other = Lock("busy", client=backend, timeout=10)
    assert not other.acquire(blocking=False)
    assert not other.acquire(timeout=0.3)
    holder.release()
    refused = _only(captured, "contended", "busy")
    timed_out = _only(captured, "timed_out", "busy")
    assert refused.holder_id is None and refused.retry_after is not None
    assert refused.waited is not None and 0 <= refused.waited < 0.3
    assert timed_out.waited is not None and timed_out.waited >= 0.3
    assert timed_out.retry_after is not None and timed_out.holder_id is None


def test_a_lost_hold_says_how_long_after_the_grant_it_was_found_lost(
    backend: Backend, captured: CapturedHolds
) -> None:
    lock = Lock("evicted", client=backend, timeout=10)
    assert lock.acquire()
    holder_id = lock.holder_id
    assert holder_id is not None
    time.sleep(0.2)
    assert force_release("evicted", holder_id, client=backend)
    with pytest.raises(LockLost):
        lock.ensure_held()
    lost = _only(captured, "lost", "evicted")
    assert lost.held is not None and lost.held >= 0.2


def test_events_carry_the_metric_name_given(backend: Backend, captured: CapturedHolds) -> None:
    lock = Lock("order:123", client=backend, timeout=10, metric_name="order")
    semaphore = Semaphore("export:9", 2, client=backend, timeout=10, metric_name="export")
    plain = Lock("plain:1", client=backend, timeout=10)
    for primitive in (lock, semaphore, plain):
        assert primitive.acquire()
        primitive.release()
    names = {(e.name, e.event): e.metric_name for e in captured.events}
    assert names[("order:123", "acquired")] == names[("order:123", "released")] == "order"
    assert names[("export:9", "acquired")] == names[("export:9", "released")] == "export"
    assert names[("plain:1", "acquired")] is None


@pytest.mark.parametrize(
    ("metric_name", "error"),
    [("", InvalidArgument), (7, InvalidArgumentType), ("a\nb", InvalidArgument)],
)
def test_a_bad_metric_name_is_refused(backend: Backend, metric_name: Any, error: type) -> None:
    with pytest.raises(error, match="metric_name"):
        Lock("x", client=backend, metric_name=metric_name)
    with pytest.raises(error, match="metric_name"):
        Semaphore("x", 1, client=backend, metric_name=metric_name)


def test_a_renewal_without_reply_is_told_on_the_callback_thread(make_server: Any) -> None:
    """Its server paused, an auto-renewed hold's renewal times out and is retried: a
    renew_failed event per failed round, from the callback thread (never the renewer's)."""
    import redis

    from django_redis_locks.core.events import Event, subscribe, unsubscribe
    from tests.harness.servers import wait_until

    server = make_server()
    seen: list[tuple[Event, str]] = []

    def listener(event: Event) -> None:
        if event.event == "renew_failed":
            seen.append((event, threading.current_thread().name))

    subscribe(listener)
    client = redis.Redis.from_url(server.url, socket_timeout=0.2)
    lock = Lock("renewed", client=client, timeout=3, auto_renew=True, metric_name="renewed")
    try:
        assert lock.acquire()
        server.pause()
        try:
            wait_until(lambda: bool(seen), timeout=10, what="a renew_failed event")
        finally:
            server.resume()
        event, thread = seen[0]
        assert event.name == "renewed" and event.metric_name == "renewed"
        assert event.holder_id == lock.holder_id and event.reason
        assert thread == "drl-callbacks"
        lock.release()  # the renewals that follow reach it again: the hold was kept
    finally:
        unsubscribe(listener)
        client.close()


def test_a_listeners_filter_that_raises_disturbs_no_operation(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``wants`` that raises is logged and taken for a yes: the acquire and the release
    work, and the listener still gets its events."""
    from django_redis_locks.core.events import Event, subscribe, unsubscribe

    got: list[Event] = []

    def wants(event_type: str) -> bool:
        raise ZeroDivisionError(event_type)

    subscribe(got.append, wants)
    try:
        lock = Lock("filtered", client=backend, timeout=5)
        assert lock.acquire()
        lock.release()
    finally:
        unsubscribe(got.append)
    assert [e.event for e in got if e.name == "filtered"] == ["acquired", "released"]
    assert "event filter" in caplog.text and "ZeroDivisionError" in caplog.text


def test_no_listener_code_runs_on_a_renewal_lane(make_server: Any) -> None:
    """A slow ``wants`` (2 s on renew_failed) delays no renewal: it runs on the callback
    thread, so both auto-renewed holds survive a 0.35 s pause of their server."""
    import redis

    from django_redis_locks.core.events import subscribe, unsubscribe

    asked_on: list[str] = []

    def wants(event_type: str) -> bool:
        if event_type == "renew_failed":
            asked_on.append(threading.current_thread().name)
            time.sleep(2)
        return False

    def listener(event: Any) -> None:
        pass

    server = make_server()
    subscribe(listener, wants)
    client = redis.Redis.from_url(server.url, socket_timeout=0.2)
    locks = [Lock(f"slow:{i}", client=client, timeout=1.5, auto_renew=True) for i in range(2)]
    try:
        for lock in locks:
            assert lock.acquire()
        time.sleep(0.45)
        server.pause()
        time.sleep(0.35)
        server.resume()
        time.sleep(2.5)
        for lock in locks:
            assert lock.ensure_held() > 0  # renewed all along
            lock.release()
        assert asked_on and set(asked_on) == {"drl-callbacks"}
    finally:
        unsubscribe(listener)
        client.close()


def test_a_hold_left_to_expire_is_expired_at_its_owners_next_acquire(
    backend: Backend, captured: CapturedHolds
) -> None:
    """A hold kept without auto_renew and never released runs out in Redis; its owner's next
    acquire of the name finds it gone and says so once: an 'expired' event (not 'lost': no
    warning, no on_lost callback, as for a hold left to expire on purpose), with how long it
    was held (the grant to its expiry)."""
    called: list[str] = []
    lock = Lock("left", client=backend, timeout=0.2, on_lost=lambda _, why: called.append(why))
    assert lock.acquire()
    wait_until(lambda: not lock.locked(), timeout=5, what="the hold's expiry")
    assert lock.acquire()
    expired = _only(captured, "expired", "left")
    assert expired.held is not None and 0.15 <= expired.held <= 0.25
    assert expired.holder_id is not None and called == []
    assert not [e for e in captured.events if e.event == "lost"]
    lock.release()

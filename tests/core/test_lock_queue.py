"""Blocked lock waiters queue in arrival order and a release hands the lock to the first."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import redis

from django_redis_locks import Lock
from django_redis_locks.core import Backend
from django_redis_locks.core import lock_protocol as protocol
from django_redis_locks.core.replies import Contended
from django_redis_locks.inspect import get_lock
from tests.harness.acl import silent_channel
from tests.harness.servers import wait_until


def queued(backend: Backend, name: str) -> int:
    return int(backend.client.zcard(backend.keys.lock(name).queue))


def queue_of(backend: Backend, name: str, count: int) -> Callable[[], bool]:
    return lambda: queued(backend, name) == count


def evalsha_calls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def test_ten_waiters_get_the_lock_in_arrival_order(backend: Backend) -> None:
    holder = Lock("fifo", client=backend, timeout=10)
    assert holder.acquire()
    order: list[int] = []
    threads = []
    for index in range(10):

        def wait_for_it(index: int = index) -> None:
            lock = Lock("fifo", client=backend, timeout=10)
            assert lock.acquire(timeout=30)
            order.append(index)
            lock.release()

        threads.append(threading.Thread(target=wait_for_it))
        threads[-1].start()
        wait_until(queue_of(backend, "fifo", index + 1), timeout=5, what="queued")
    holder.release()
    for thread in threads:
        thread.join(timeout=30)
    assert order == list(range(10))
    assert queued(backend, "fifo") == 0


def test_a_release_hands_the_lock_to_a_live_waiter_without_another_round_trip(
    make_server,
) -> None:
    server = make_server()
    client = server.client(socket_timeout=5)
    backend = Backend(client, namespace="handover")
    holder = Lock("baton", client=backend, timeout=10)
    assert holder.acquire()
    holder.release()  # both scripts are loaded now: no NOSCRIPT retry below
    assert holder.acquire()
    waiter = Lock("baton", client=backend, timeout=10)
    waiter.recheck_seconds = 60  # type: ignore[misc]  # no re-check during the test
    acquired: list[object] = []
    handed_over = threading.Event()

    def wait_for_it() -> None:
        acquired.extend([waiter.acquire(timeout=10), waiter.holder_id, waiter.fence])
        handed_over.wait(10)
        waiter.release()

    thread = threading.Thread(target=wait_for_it)
    before = evalsha_calls(client)
    thread.start()
    # The waiter tries, registers for its wake-up, tries again (and queues), then sleeps.
    wait_until(lambda: evalsha_calls(client) - before == 2, timeout=5, what="its two tries")
    wait_until(queue_of(backend, "baton", 1), timeout=5, what="queued")
    holder.release()
    wait_until(lambda: bool(acquired), timeout=10, what="the waiter to have the lock")
    # One script more: the holder's release, which handed the lock to the waiter (its process
    # heard the message: alive, so for the full TTL).
    assert evalsha_calls(client) - before == 3
    assert acquired[0] is True and holder.fence is None
    info = get_lock("baton", client=backend)
    assert info is not None and (info.holder_id, info.fence) == (acquired[1], acquired[2])
    handed_over.set()
    thread.join(timeout=10)
    client.close()


def test_a_try_never_overtakes_a_queued_waiter_and_a_dead_ones_place_runs_out(
    backend: Backend,
) -> None:
    keys = backend.keys.lock("fair")
    short = Lock("fair", client=backend, timeout=0.2)
    assert short.acquire()
    # A waiter that queued and never comes back: its place lasts 0.5 s.
    call = protocol.acquire_call(
        keys, "ghost-token", 10_000, "{}", queue=True, lease_ms=500, channel=silent_channel(backend)
    )
    reply = protocol.decode_acquire(backend.client.evalsha(*call.evalsha_args()))
    assert isinstance(reply, Contended) and reply.position == 1
    wait_until(lambda: not short.locked(), timeout=5, what="the holder to expire")
    latecomer = Lock("fair", client=backend, timeout=5, blocking=False)
    assert not latecomer.acquire()  # free, but the queued waiter comes first
    assert latecomer.acquire(blocking=True, timeout=5)  # once its place ran out
    latecomer.release()


def test_a_waiter_that_gives_up_leaves_the_queue(backend: Backend) -> None:
    holder = Lock("patience", client=backend, timeout=10)
    assert holder.acquire()
    started = time.monotonic()
    assert not Lock("patience", client=backend).acquire(timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 2
    assert queued(backend, "patience") == 0
    holder.release()
    assert not holder.locked()  # nobody was handed the lock


def take_and_release(lock: Lock, timeout: float, results: dict[str, bool], key: str) -> None:
    results[key] = lock.acquire(timeout=timeout)
    if results[key]:
        lock.release()


def test_a_waiter_handed_the_lock_while_giving_up_passes_it_on(backend: Backend) -> None:
    """The give-up and the hand-over race; whichever comes first, nobody is left holding it."""
    for attempt in range(20):
        holder = Lock("race", client=backend, timeout=10)
        assert holder.acquire()
        results: dict[str, bool] = {}
        quitter = threading.Thread(
            target=take_and_release,
            args=(Lock("race", client=backend, timeout=10), 0.2, results, "quitter"),
        )
        quitter.start()
        wait_until(queue_of(backend, "race", 1), timeout=5, what="the quitter queued")
        patient = threading.Thread(
            target=take_and_release,
            args=(Lock("race", client=backend, timeout=10), 10, results, "patient"),
        )
        patient.start()
        wait_until(queue_of(backend, "race", 2), timeout=5, what="the patient one queued")
        # Release before, about at, or after the quitter's 0.2 s run out: every ordering of
        # the give-up and the hand-over must leave the lock with the patient waiter.
        time.sleep(0.01 * attempt)  # varies where the release falls; not a wait for a state
        holder.release()
        quitter.join(timeout=10)
        patient.join(timeout=10)
        assert results["patient"] is True
        assert not holder.locked() and queued(backend, "race") == 0


def test_a_dead_waiter_handed_the_lock_blocks_only_until_its_ttl_when_shorter_than_the_window(
    backend: Backend,
) -> None:
    """The hand-over window is at most the waiter's TTL (tests/core/test_dead_waiters.py:
    a waiter with a long TTL keeps a hand-over for the window)."""
    keys = backend.keys.lock("orphan")
    holder = Lock("orphan", client=backend, timeout=10, slice_seconds=0)
    assert holder.acquire()
    # A waiter that queued with a 0.5 s TTL, then died with its place still valid.
    call = protocol.acquire_call(
        keys, "dead-token", 500, "{}", queue=True, lease_ms=5000, channel=silent_channel(backend)
    )
    backend.client.evalsha(*call.evalsha_args())
    holder.release()  # hands the lock to the dead waiter
    successor = Lock("orphan", client=backend, timeout=5)
    started = time.monotonic()
    assert successor.acquire(timeout=5)
    assert 0.3 < time.monotonic() - started < 1.5
    successor.release()


def test_within_its_slice_the_holder_takes_the_lock_back_then_hands_it_on(
    backend: Backend,
) -> None:
    holder = Lock("slices", client=backend, timeout=10, slice_seconds=1.0, blocking=False)
    sliced_at = time.monotonic()
    assert holder.acquire()
    got: list[float] = []
    waiter = threading.Thread(
        target=lambda: got.append(
            time.monotonic() if Lock("slices", client=backend).acquire(timeout=10) else -1
        )
    )
    waiter.start()
    wait_until(queue_of(backend, "slices", 1), timeout=5, what="queued")
    retaken = 0
    while (slice_left := 1.0 - (time.monotonic() - sliced_at)) > 0.5:
        holder.release()
        assert holder.acquire(), f"retaking within the slice failed ({slice_left:.3f} s left)"
        retaken += 1
    assert retaken > 0 and queued(backend, "slices") == 1
    wait_until(lambda: time.monotonic() - sliced_at > 1.0, timeout=5, what="the slice's end")
    released_at = time.monotonic()
    holder.release()  # after the slice: handed to the waiter
    assert not holder.acquire()
    waiter.join(timeout=10)
    assert got and got[0] >= released_at


def test_a_slice_kept_lock_goes_to_the_waiter_when_the_slice_ends(backend: Backend) -> None:
    holder = Lock("kept", client=backend, timeout=10, slice_seconds=0.3)
    assert holder.acquire()
    waiter = Lock("kept", client=backend, timeout=10)
    result: list[float] = []
    thread = threading.Thread(
        target=lambda: result.append(time.monotonic() if waiter.acquire(timeout=10) else -1)
    )
    thread.start()
    wait_until(queue_of(backend, "kept", 1), timeout=5, what="queued")
    released_at = time.monotonic()
    holder.release()  # within the slice: kept for the holder, which does not come back
    thread.join(timeout=10)
    assert result and 0 < result[0] - released_at < 0.3 + 0.2  # at the slice's end, not later


def test_without_slices_every_release_hands_the_lock_on(backend: Backend) -> None:
    holder = Lock("strict", client=backend, timeout=10, slice_seconds=0, blocking=False)
    assert holder.acquire()
    thread = threading.Thread(target=lambda: Lock("strict", client=backend).acquire(timeout=10))
    thread.start()
    wait_until(queue_of(backend, "strict", 1), timeout=5, what="queued")
    holder.release()
    assert not holder.acquire()  # already the waiter's
    thread.join(timeout=10)

"""Hot locks: contention counted by the scripts where it happens, and only there (lib/hot.lua),
read back by ``hot_names`` from any process."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from django_redis_locks.core import Backend, Lock, Semaphore
from django_redis_locks.core.errors import InvalidArgument, InvalidArgumentType
from django_redis_locks.core.hot import hot_names
from django_redis_locks.core.protocol.constants import HOT_LONG_MS, HOT_NAMES, HOT_SHORT_MS
from django_redis_locks.core.protocol.hot_figures import decode_figures
from django_redis_locks.core.protocol.keys import KeySpace
from tests.harness.plugin import MakeServer
from tests.harness.servers import wait_until


def _hot_keys(client: redis.Redis, namespace: str) -> list[bytes]:
    return sorted(client.scan_iter(match=f"{namespace}:*:hot", count=1000))


def test_uncontended_cycles_write_no_figures(make_server: MakeServer) -> None:
    server = make_server()
    with server.client(socket_timeout=5) as client:
        backend = Backend(client, namespace="calm")
        for _ in range(20):
            with Lock("calm", client=backend, timeout=30):
                pass
            with Semaphore("calm", 2, client=backend, timeout=30):
                pass
        assert _hot_keys(client, "calm") == []
        assert hot_names(client=backend) == []


def test_a_refused_try_a_wait_and_a_handed_over_hold_are_counted(make_server: MakeServer) -> None:
    server = make_server()
    with server.client(socket_timeout=5) as client:
        backend = Backend(client, namespace="hot")
        holder = Lock("invoice:7", client=backend, timeout=30)
        assert holder.acquire()
        assert not Lock("invoice:7", client=backend, timeout=30).acquire(blocking=False)
        waited: list[float] = []

        def wait() -> None:
            started = time.monotonic()
            lock = Lock("invoice:7", client=backend, timeout=30)
            assert lock.acquire(timeout=10)
            waited.append(time.monotonic() - started)
            lock.release()

        waiter = threading.Thread(target=wait)
        waiter.start()
        queue = backend.keys.lock("invoice:7").queue
        wait_until(lambda: client.exists(queue), timeout=5, what="the waiter's place")
        time.sleep(0.3)  # the hold others wait for lasts at least this long
        holder.release()
        waiter.join(10)
        assert waited
        (hot,) = hot_names(client=backend)
        assert (hot.name, hot.kind, hot.window) == ("invoice:7", "lock", 300)
        assert (hot.refused, hot.queued, hot.left, hot.waits, hot.holds) == (1, 1, 0, 1, 1)
        assert 0.25 <= hot.wait_seconds <= waited[0] + 0.05
        assert hot.longest_wait == hot.wait_seconds == hot.mean_wait
        assert 0.3 <= hot.hold_seconds < 5
        assert hot.contended == 2
        (long,) = hot_names(3600, client=backend)
        assert (long.refused, long.queued, long.waits, long.holds) == (1, 1, 1, 1)
        (key,) = _hot_keys(client, "hot")
        assert 0 < client.pttl(key) <= 2 * HOT_LONG_MS


def test_a_waiter_that_gives_up_is_counted_as_left(make_server: MakeServer) -> None:
    server = make_server()
    with server.client(socket_timeout=5) as client:
        backend = Backend(client, namespace="hot")
        for kind, make in (
            ("lock", lambda: Lock("report", client=backend, timeout=30)),
            ("semaphore", lambda: Semaphore("report", 1, client=backend, timeout=30)),
        ):
            holder = make()
            assert holder.acquire()
            assert not make().acquire(timeout=0.3)
            holder.release()
            (hot,) = hot_names(client=backend, kind=kind)  # type: ignore[arg-type]
            assert (hot.queued, hot.left, hot.waits, hot.holds) == (1, 1, 0, 0), hot


def test_a_semaphores_contention_is_counted(make_server: MakeServer) -> None:
    server = make_server()
    with server.client(socket_timeout=5) as client:
        backend = Backend(client, namespace="hot")
        holders = [Semaphore("exports", 2, client=backend, timeout=30) for _ in range(2)]
        for holder in holders:
            assert holder.acquire()
        assert not Semaphore("exports", 2, client=backend, timeout=30).acquire(blocking=False)
        got: list[bool] = []
        waiter = threading.Thread(
            target=lambda: got.append(
                Semaphore("exports", 2, client=backend, timeout=30).acquire(timeout=10)
            )
        )
        waiter.start()
        queue = backend.keys.semaphore("exports").queue
        wait_until(lambda: client.exists(queue), timeout=5, what="the waiter's place")
        time.sleep(0.2)
        holders[0].release()
        waiter.join(10)
        assert got == [True]
        (hot,) = hot_names(client=backend)
        assert (hot.name, hot.kind) == ("exports", "semaphore")
        assert (hot.refused, hot.queued, hot.waits, hot.holds) == (1, 1, 1, 1)
        assert hot.wait_seconds >= 0.15 and hot.hold_seconds >= 0.2


def test_a_bucket_keeps_at_most_hot_names_and_the_most_contended_stay(
    make_server: MakeServer,
) -> None:
    server = make_server()
    with server.client(socket_timeout=5) as client:
        backend = Backend(client, namespace="many")
        bucket = KeySpace.bucket("busy")
        names = [f"n{i}" for i in range(30_000) if KeySpace.bucket(f"n{i}") == bucket]
        names = names[: HOT_NAMES + 8]
        assert len(names) == HOT_NAMES + 8
        holder = Lock("busy", client=backend, timeout=30)
        assert holder.acquire()
        for _ in range(5):  # the hottest name: five refusals
            assert not Lock("busy", client=backend, timeout=30).acquire(blocking=False)
        for name in names:  # each refused once
            held = Lock(name, client=backend, timeout=30)
            assert held.acquire()
            assert not Lock(name, client=backend, timeout=30).acquire(blocking=False)
            held.release()
        assert client.hlen(backend.keys.registry(bucket).hot) == HOT_NAMES
        top = hot_names(count=1000, client=backend)
        assert len(top) == HOT_NAMES
        assert (top[0].name, top[0].refused) == ("busy", 5)
        assert {hot.name for hot in top[1:]} <= set(names)


def test_figures_over_a_window_count_the_one_before_in_proportion() -> None:
    short = HOT_SHORT_MS
    index = 1000
    current = [1, 2, 0, 1, 400, 400, 1, 900, 900]
    before = [10, 0, 0, 2, 100, 80, 0, 0, 0]
    long_part = [0] * 19
    value = " ".join(str(n) for n in [index, *current, *before, *long_part])
    half = decode_figures(value, short, index * short + short // 2)
    assert (half.refused, half.queued, half.waits, half.wait_ms) == (6, 2, 2, 450)
    assert half.longest_wait_ms == 400 and half.longest_hold_ms == 900
    start = decode_figures(value, short, index * short)
    assert start.refused == 11
    next_window = decode_figures(value, short, (index + 1) * short + short // 4)
    assert (next_window.refused, next_window.holds) == (1, 1)  # the current became the one before
    assert decode_figures(value, short, (index + 2) * short).refused == 0  # out of reach


def test_hot_names_refuses_bad_arguments(make_server: MakeServer) -> None:
    server = make_server()
    with server.client(socket_timeout=5) as client:
        backend = Backend(client, namespace="args")
        with pytest.raises(InvalidArgument, match="300, 3600"):
            hot_names(60, client=backend)
        with pytest.raises(InvalidArgumentType):
            hot_names("300", client=backend)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            hot_names(count=0, client=backend)
        with pytest.raises(InvalidArgument):
            hot_names(kind="locks", client=backend)  # type: ignore[arg-type]


def test_a_waiter_that_gives_back_an_unconfirmed_hand_over_is_counted_as_left(
    make_server: MakeServer,
) -> None:
    """A waiter whose wait runs out just as the lock is handed to it gives it back: it gave
    up, as one still queued would (queued = left + waits)."""
    from django_redis_locks.core.protocol import lock_calls

    server = make_server()
    with server.client(socket_timeout=5) as client:
        backend = Backend(client, namespace="handed")
        keys = backend.keys.lock("invoice:9")
        holder = Lock("invoice:9", client=backend, timeout=30, slice_seconds=0)
        assert holder.acquire()
        ask = lock_calls.acquire_call(keys, "w" * 32, 30_000, "{}", queue=True, lease_ms=3_000)
        assert int(backend.run_many([ask])[0][0]) == 0  # queued
        holder.release()  # handed to the waiter, for the confirmation window
        assert client.hget(keys.lock, "token") == b"w" * 32
        gave_back = lock_calls.release_call(keys, "w" * 32)
        assert int(backend.run_many([gave_back])[0]) == 1
        (hot,) = hot_names(client=backend)
        assert (hot.queued, hot.left, hot.waits, hot.holds) == (1, 1, 0, 1)


def test_names_contended_by_turns_climb_past_a_full_buckets_others(
    make_server: MakeServer,
) -> None:
    """A new name takes the least contended one's place and inherits its score (space-saving):
    two names refused by turns, 20 times each, in a bucket full of names refused 3 times each,
    end at the top instead of evicting each other for ever."""
    server = make_server()
    with server.client(socket_timeout=5) as client:
        backend = Backend(client, namespace="turns")
        bucket = KeySpace.bucket("busy")
        names = [f"n{i}" for i in range(60_000) if KeySpace.bucket(f"n{i}") == bucket]
        others, (first, second) = names[: HOT_NAMES - 1], names[HOT_NAMES : HOT_NAMES + 2]
        holders = {name: Lock(name, client=backend, timeout=30) for name in names[: HOT_NAMES + 2]}
        for holder in holders.values():
            assert holder.acquire()
        for name in others:
            for _ in range(3):
                assert not Lock(name, client=backend, timeout=30).acquire(blocking=False)
        for _ in range(20):
            for name in (first, second):
                assert not Lock(name, client=backend, timeout=30).acquire(blocking=False)
        top = hot_names(count=2, client=backend)
        assert {hot.name for hot in top} == {first, second}
        assert all(hot.refused >= 10 for hot in top), top  # their own refusals, not inherited
        assert client.hlen(backend.keys.registry(bucket).hot) == HOT_NAMES

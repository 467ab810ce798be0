"""The pieces that bound late copies of an acquire, without a server: the deadline arithmetic
(core/runtime/deadlines.py), the count of resends (core/runtime/resends.py) and the watch's replies
(renewal_work.reclaim_replied on a Reclaim.watching)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis

from django_redis_locks.core.connection.libraries import library_of
from django_redis_locks.core.protocol import replies
from django_redis_locks.core.protocol.scripting import Call, load
from django_redis_locks.core.runtime.deadlines import (
    CLOCK_RATE,
    CLOCK_SLACK,
    NO_TIMEOUT_WINDOW,
    ServerClock,
    passed,
    request_window,
    server_ms,
)
from django_redis_locks.core.runtime.renewal_work import Reclaim, reclaim_replied
from django_redis_locks.core.runtime.resends import counting


def test_the_window_is_twice_the_socket_timeout_or_ten_seconds_without_one() -> None:
    assert request_window(0.5) == 1.0
    assert request_window(5) == 10.0
    assert request_window(None) == NO_TIMEOUT_WINDOW == 10.0


def test_a_deadline_is_the_server_time_last_seen_moved_on_by_the_local_clock() -> None:
    clock = ServerClock()
    assert not clock.known
    clock.learn(1_700_000_000_000, received_at=100.0)
    # sent 0.25 s after that reply, valid 1 s: 1.25 s of server time later
    assert clock.deadline_ms(100.25, 1.0) == 1_700_000_001_250
    assert clock.deadline_ms(100.0000004, 1.0) == 1_700_000_001_000  # (whole ms, no float dust)
    # back on the local clock: the span stretched by CLOCK_RATE, plus CLOCK_SLACK
    at = clock.passed(1_700_000_001_250)
    assert at == pytest.approx(100.0 + 1.25 * (1 + CLOCK_RATE) + CLOCK_SLACK)
    assert at > 101.25
    assert passed(5.0, -20) == 5.0 + CLOCK_SLACK  # a deadline already behind: now, and slack


def test_a_time_reply_in_milliseconds() -> None:
    assert server_ms([b"1700000000", b"123999"]) == 1_700_000_000_123
    assert server_ms(["1700000000", "5"]) == 1_700_000_000_000


def _retry(asyncio_: bool) -> Any:
    library = library_of(redis.Redis)
    assert library is not None
    return library.retry(asyncio=asyncio_)


def test_the_backends_retry_policy_counts_a_resend_in_the_callers_context() -> None:
    retry = _retry(False)
    attempts: list[int] = []

    def do() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise redis.ConnectionError("cut")
        return "ok"

    with counting() as count:
        assert retry.call_with_retry(do, lambda error: None) == "ok"
    assert count.resent and count.failures == 1
    with counting() as count:
        assert retry.call_with_retry(lambda: "once", lambda error: None) == "once"
    assert not count.resent
    retry.call_with_retry(do, lambda error: None)  # outside a count: nothing noted, no error


def test_the_asyncio_retry_policy_counts_a_resend_too() -> None:
    retry = _retry(True)
    attempts: list[int] = []
    failed: list[Exception] = []

    async def do() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise redis.ConnectionError("cut")
        return "ok"

    async def fail(error: Exception) -> None:
        failed.append(error)

    async def main() -> bool:
        with counting() as count:
            assert await retry.call_with_retry(do, fail) == "ok"
        return count.resent

    assert asyncio.run(main())
    assert len(failed) == 1  # the library's own failure handler still runs


def _watch(until_in: float, *, now: bool = False) -> Reclaim:
    call = Call(load("lock_release"), ("k",) * 6, ("token", "token", "-"))
    return Reclaim.watching(None, call, time.monotonic() + until_in, 30.0, "a test", now=now)


def test_a_watch_keeps_looking_after_an_undo_until_its_end() -> None:
    item = _watch(10.0)
    assert item.due == pytest.approx(time.monotonic() + 0.5, abs=0.05)  # first look: 0.5 s
    assert not reclaim_replied(item, replies.RELEASED)  # a copy undone: another may land
    assert not reclaim_replied(item, replies.NOT_HELD)
    assert item.due <= item.until
    assert reclaim_replied(item, replies.NOT_HELD, sent_at=item.until)  # looked at the end


def test_a_watchs_last_look_comes_at_its_end_and_settles_whatever_it_finds() -> None:
    item = _watch(0.2)
    assert item.due == pytest.approx(item.until)  # sooner than a re-check interval
    assert reclaim_replied(item, replies.RELEASED, sent_at=item.until)


def test_a_watch_that_cannot_reach_redis_tries_until_what_it_undoes_expired() -> None:
    item = _watch(-1.0, now=True)  # its end passed already: one look settles it
    assert item.due <= time.monotonic()
    assert not reclaim_replied(item, redis.ConnectionError("down"))
    assert item.gives_up == pytest.approx(item.until + 30.0)
    assert reclaim_replied(item, replies.NOT_HELD, sent_at=time.monotonic())

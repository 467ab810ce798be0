"""A hold handed from one owner to another (hand_off / take_over): never free in between,
taken over once, renewed and listed as the new owner's."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from django_redis_locks import (
    InvalidArgument,
    Lock,
    LockAlreadyHeld,
    LockNotOwned,
    ahand_off,
    atake_over,
    hand_off,
    take_over,
)
from django_redis_locks.core import Backend
from django_redis_locks.core.protocol import lock_calls
from django_redis_locks.core.protocol.scripting import run
from django_redis_locks.core.registry import force_release, get_lock
from tests.harness.servers import wait_until


def _in_thread(function: Any) -> Any:
    """Run ``function`` in a thread of its own (another owner); its result."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(function()))
    thread.start()
    thread.join(30)
    assert out, "the thread failed"
    return out[0]


def test_a_handed_off_hold_is_never_free_and_becomes_the_taker_s(backend: Backend) -> None:
    giver = Lock("handed", client=backend, timeout=5, metadata={"label": "giver"})
    taker = Lock("handed", client=backend, timeout=30, metadata={"label": "taker"})
    assert giver.acquire(blocking=False)
    first_fence = giver.fence
    ticket = hand_off(giver)
    assert giver.fence is None  # this owner holds it no more
    with pytest.raises(LockNotOwned):
        giver.release()
    assert giver.locked()  # but Redis keeps it: nobody else can take it
    assert not Lock("handed", client=backend).acquire(blocking=False)
    assert get_lock("handed", client=backend).metadata["label"] == "giver"  # type: ignore[union-attr]

    def run() -> tuple[bool, int | None, float, bool]:
        taken = take_over(taker, ticket)
        fence = taker.fence
        left = taker.ensure_held()
        intruder = Lock("handed", client=backend).acquire(blocking=False)
        taker.release()
        return taken, fence, left, intruder

    taken, fence, left, intruder = _in_thread(run)
    assert taken and not intruder
    assert fence is not None and first_fence is not None and fence > first_fence
    assert 25 < left <= 30  # the taker's own TTL
    assert not giver.locked()  # the taker's release freed it


def test_the_listing_shows_the_taker_and_the_taker_s_hold_is_renewed(backend: Backend) -> None:
    giver = Lock("listed-taker", client=backend, timeout=5)
    taker = Lock(
        "listed-taker", client=backend, timeout=1, auto_renew=True, metadata={"label": "the worker"}
    )
    assert giver.acquire(blocking=False)
    ticket = hand_off(giver)
    assert take_over(taker, ticket)
    info = get_lock("listed-taker", client=backend)
    assert info is not None and info.label == "the worker" and info.fence == taker.fence
    assert info.pid == os.getpid() and info.holder_id == taker.holder_id
    time.sleep(2.5)  # more than twice its TTL: renewed meanwhile
    assert taker.owned()
    taker.release()


def test_a_ticket_is_taken_over_once(backend: Backend) -> None:
    giver = Lock("once", client=backend, timeout=30)
    assert giver.acquire(blocking=False)
    ticket = hand_off(giver)
    first = Lock("once", client=backend, timeout=30)
    assert take_over(first, ticket)
    # A task delivered twice: the second worker, with the same ticket, is refused.
    assert _in_thread(lambda: take_over(Lock("once", client=backend, timeout=30), ticket)) is False
    assert first.owned()
    first.release()
    # Nor does the ticket take the name once it is free again.
    assert _in_thread(lambda: take_over(Lock("once", client=backend, timeout=30), ticket)) is False
    assert not first.locked()


def test_a_ticket_whose_hold_expired_or_was_evicted_takes_nothing(backend: Backend) -> None:
    giver = Lock("gone", client=backend, timeout=0.3)
    assert giver.acquire(blocking=False)
    expired = hand_off(giver)
    wait_until(lambda: not giver.locked(), timeout=5, what="the handed-off hold expired")
    taker = Lock("gone", client=backend, timeout=30)
    assert take_over(taker, expired) is False
    assert not taker.locked()

    assert giver.acquire(blocking=False)
    holder_id = giver.holder_id
    evicted = hand_off(giver)
    assert holder_id is not None and force_release("gone", holder_id, client=backend)
    assert take_over(taker, evicted) is False
    assert not taker.locked()


def test_the_hold_handed_off_is_not_renewed_any_more(backend: Backend) -> None:
    """Handed off, it lasts what was left of its TTL: a process that hands it off and dies,
    or whose ticket is never taken over, leaves it for no longer."""
    giver = Lock("unrenewed", client=backend, timeout=1, auto_renew=True)  # renewed while held
    assert giver.acquire(blocking=False)
    hand_off(giver)
    started = time.monotonic()
    wait_until(lambda: not giver.locked(), timeout=5, what="the hold expired")
    assert time.monotonic() - started < 1.5


def test_misuse_is_refused_clearly(backend: Backend) -> None:
    lock = Lock("misuse", client=backend, timeout=30)
    with pytest.raises(LockNotOwned):
        hand_off(lock)
    for bad in ("", "drl1.", "drl1.x.0123456789abcdef0123", "token", "drl1.5"):
        with pytest.raises(InvalidArgument, match="ticket"):
            take_over(lock, bad)
    with pytest.raises(TypeError, match="ticket"):
        take_over(lock, 5)  # type: ignore[arg-type]
    giver = Lock("misuse", client=backend, timeout=30)
    other = Lock("misuse-2", client=backend, timeout=30)
    assert other.acquire(blocking=False)
    assert giver.acquire(blocking=False)
    ticket = hand_off(giver)

    def taken_twice() -> None:
        mine = Lock("misuse", client=backend, timeout=30)
        assert take_over(mine, ticket)
        with pytest.raises(LockAlreadyHeld):
            take_over(mine, ticket)
        mine.release()

    _in_thread(taken_twice)
    other.release()


def test_a_resent_take_over_counts_once(backend: Backend, redis_client: Any) -> None:
    """A take-over sent twice (its first reply lost) is granted again, not refused: the
    new token holds already."""
    giver = Lock("resent-take-over", client=backend, timeout=30)
    assert giver.acquire(blocking=False)
    fence = giver.fence
    assert fence is not None
    ticket = hand_off(giver)
    token = ticket.rsplit(".", 1)[1]
    keys = giver._keys_for(backend)
    call = lock_calls.take_over_call(
        keys, token, fence, new_token="n" * 32, ttl_ms=30_000, metadata="{}", session="s"
    )
    first = run(redis_client, call)
    again = run(redis_client, call)
    assert int(first[0]) == 1 and int(first[4]) == 0
    assert int(again[0]) == 1 and int(again[4]) == 1 and int(again[1]) == int(first[1])
    assert int(run(redis_client, lock_calls.release_call(keys, "n" * 32))) == 1


def test_asyncio_hands_off_and_takes_over(backend: Backend) -> None:
    async def scenario() -> tuple[bool, bool]:
        giver = Lock("async-handed", client=backend, timeout=30)
        assert await giver.aacquire(blocking=False)
        ticket = await ahand_off(giver)
        taker = Lock("async-handed", client=backend, timeout=30)

        async def take() -> bool:
            taken = await atake_over(taker, ticket)
            await taker.arelease()
            return taken

        taken = await asyncio.create_task(take())
        return taken, await giver.alocked()

    assert asyncio.run(scenario()) == (True, False)


_TAKER = """
import sys
import redis
from django_redis_locks import Lock, take_over
from django_redis_locks.core import Backend
backend = Backend(redis.Redis.from_url(sys.argv[1]), namespace=sys.argv[2])
lock = Lock("across", client=backend, timeout=30, metadata={"label": "child"})
print(take_over(lock, sys.stdin.read().strip()), lock.fence, flush=True)
lock.release()
"""


def test_another_process_takes_it_over(backend: Backend, redis_server: Any) -> None:
    giver = Lock("across", client=backend, timeout=30)
    assert giver.acquire(blocking=False)
    fence = giver.fence
    ticket = hand_off(giver)
    child = subprocess.run(
        [sys.executable, "-c", _TAKER, redis_server.url, backend.keys.namespace],
        input=ticket,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    taken, child_fence = child.stdout.split()
    assert taken == "True" and fence is not None and int(child_fence) > fence
    assert not giver.locked()


def test_a_take_over_whose_reply_never_came_is_undone(make_server: Any) -> None:
    """The take-over ran but its reply was lost: the caller gets LockBackendError, and the
    hold it may have made is released in the background, not left for its TTL."""
    from django_redis_locks import LockBackendError
    from tests.helpers import proxied_backend

    with proxied_backend(make_server(), namespace="lost-take", socket_timeout=1.0) as proxied:
        giver = Lock("lost-take", client=proxied.backend, timeout=30)
        taker = Lock("lost-take", client=proxied.backend, timeout=30, auto_renew=True)
        for _ in range(2):  # (the first round loads the script through the proxy)
            assert giver.acquire(blocking=False)
            ticket = hand_off(giver)
            if _ == 0:
                assert take_over(taker, ticket)
                taker.release()
        with proxied.proxy.withholding("drop"), pytest.raises(LockBackendError):
            take_over(taker, ticket)
        assert taker.fence is None  # no hold here
        wait_until(lambda: not giver.locked(), timeout=10, what="the unheard take-over undone")
        assert take_over(taker, ticket) is False  # the ticket was spent by the lost one

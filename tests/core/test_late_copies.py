"""A late copy of an acquire: the request went out twice (its first connection broke before the
reply, and the client resent it on a new one), and the first copy reaches Redis after the
caller is done with the token, as TCP delivers a closed socket's unsent data, or a proxy or a
paused server reads a request late.

The proxy withholds the acquire's first copy and closes its connection, so the Backend's retry
policy resends it; the test releases (or gives up), then delivers the withheld bytes, the
exact request the client sent, on a connection of their own. Before requests carried a
deadline and a resent acquire's token was watched after its hold ended, the copy took the
name (or a place in the queue) again, for a token nobody holds, for its TTL (lease).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from django_redis_locks.core import Lock, Semaphore
from django_redis_locks.core.protocol.scripting import load
from tests.harness.servers import wait_until
from tests.helpers import Proxied, held_ttl_ms, is_held, proxied_backend

#: The proxied clients' socket timeout: a request that can grant is valid twice as long.
SOCKET_TIMEOUT = 1.0
WINDOW = 2 * SOCKET_TIMEOUT
#: How soon what a late copy made must be gone: the watch looks half a second after the
#: release, then at growing intervals, the last time when the copy's deadline passed.
UNDONE_WITHIN = 1.5


@pytest.fixture
def proxied(make_server: Any) -> Iterator[Proxied]:
    with proxied_backend(make_server(), namespace="late", socket_timeout=SOCKET_TIMEOUT) as p:
        yield p


def withhold_next(proxied: Proxied, script: str) -> None:
    proxied.proxy.withhold_next_request(load(script).sha.encode())


def test_a_late_copy_of_a_lock_acquire_landing_after_the_release_is_undone(
    proxied: Proxied,
) -> None:
    lock = Lock("late-lock", client=proxied.backend, timeout=30)
    key = lock._keys_for(proxied.backend).lock
    withhold_next(proxied, "lock_acquire")
    assert lock.acquire(blocking=False)  # the resend, on a new connection, got it
    assert len(proxied.proxy.withheld) == 1
    lock.release()
    proxied.proxy.deliver_withheld()  # the first copy lands, within its window
    landed = time.monotonic()
    ttl_ms = held_ttl_ms(proxied.direct, key)
    assert ttl_ms is not None and ttl_ms > 29_000  # it took the name, for nobody
    wait_until(
        lambda: not is_held(proxied.direct, key),
        timeout=UNDONE_WITHIN,
        what="the late copy's grant undone",  # kept 30 s before the fix
    )
    print(f"late copy's grant undone {time.monotonic() - landed:.3f} s after it landed")
    assert lock.acquire(blocking=False)  # and the name is free for everyone
    lock.release()


def test_a_late_copy_past_its_deadline_writes_nothing(proxied: Proxied) -> None:
    semaphore = Semaphore("late-sem", 1, client=proxied.backend, timeout=30)
    keys = semaphore._keys_for(proxied.backend)
    withhold_next(proxied, "sem_acquire")
    sent = time.monotonic()
    assert semaphore.acquire(blocking=False)
    semaphore.release()
    time.sleep(max(0.0, sent + WINDOW + 0.3 - time.monotonic()))  # past the watch, too
    reply = proxied.proxy.deliver_withheld()
    print(f"copy delivered {time.monotonic() - sent:.3f} s after it was sent: {reply!r}")
    assert reply.startswith(b"*2\r\n:-3\r\n"), reply  # {-3, now_ms}: refused, nothing written
    assert semaphore.count() == 0  # before the fix: the slot taken again for 30 s
    assert proxied.direct.zcard(keys.holders) == 0


def test_a_late_copy_of_a_waiters_ask_does_not_keep_a_place(proxied: Proxied) -> None:
    """The waiter's first ask is resent and queues it; the waiter gives up and leaves the
    queue; then the first copy lands: it queues the token again (a place, a lease and a
    waiter record) that the watch must take out, records and all."""
    holder = Semaphore("late-queue", 1, client=proxied.backend, timeout=30)
    waiter = Semaphore("late-queue", 1, client=proxied.backend, timeout=30)
    keys = waiter._keys_for(proxied.backend)
    assert holder.acquire()
    withhold_next(proxied, "sem_acquire")
    assert not waiter.acquire(timeout=0.3)  # queued (by the resend), then gave up
    assert len(proxied.proxy.withheld) == 1
    assert proxied.direct.zcard(keys.queue) == 0
    proxied.proxy.deliver_withheld()
    [queued] = proxied.direct.zrange(keys.queue, 0, -1)  # queued again, for nobody
    assert isinstance(queued, bytes)
    token = queued
    record = b"w:" + token

    def no_trace() -> bool:
        return (
            proxied.direct.zscore(keys.queue, token) is None
            and proxied.direct.zscore(keys.leases, token) is None
            and not proxied.direct.hexists(keys.info, record)
        )

    landed = time.monotonic()
    assert not no_trace()
    # kept its place for its 3 s lease before the fix (and was admitted when a slot freed)
    wait_until(no_trace, timeout=UNDONE_WITHIN, what="the late copy's place taken out")
    print(f"late copy's place taken out {time.monotonic() - landed:.3f} s after it landed")
    holder.release()
    assert waiter.acquire(blocking=False)
    waiter.release()


def test_a_late_copy_of_an_asyncio_acquire_is_undone(proxied: Proxied) -> None:
    lock = Lock("late-async", client=proxied.backend, timeout=30)
    key = lock._keys_for(proxied.backend).lock

    async def hold_and_release() -> None:
        withhold_next(proxied, "lock_acquire")
        assert await lock.aacquire(blocking=False)
        await lock.arelease()

    asyncio.run(hold_and_release())
    assert len(proxied.proxy.withheld) == 1
    proxied.proxy.deliver_withheld()
    landed = time.monotonic()
    assert is_held(proxied.direct, key)
    wait_until(
        lambda: not is_held(proxied.direct, key),
        timeout=UNDONE_WITHIN,
        what="the late copy's grant undone",
    )
    print(f"asyncio: late copy's grant undone {time.monotonic() - landed:.3f} s after it landed")

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
import threading
import time
from collections.abc import Iterator
from typing import Any, Literal, cast

import pytest

from django_redis_locks.core import Backend, Lock, LockLost, Semaphore
from django_redis_locks.core.protocol import lock_calls
from django_redis_locks.core.protocol.holder import holder_id, new_token
from django_redis_locks.core.protocol.replies import Evicted
from django_redis_locks.core.protocol.scripting import load
from django_redis_locks.core.registry import force_release
from tests.harness.servers import wait_until
from tests.helpers import Proxied, held_ttl_ms, is_held, proxied_backend

Kind = Literal["lock", "semaphore"]
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


def test_a_late_copy_landing_after_a_force_release_is_undone_when_its_holder_learns(
    proxied: Proxied,
) -> None:
    """The hold ends in Redis (here it is removed, as an expiry would) before its owner
    knows; a late copy of its resent ask lands in between and queues the token again, behind
    the slot's new holder; the owner learns only after the copy's deadline, when no more
    copies can land. Before the fix nothing was watched then, and the place stayed, for
    nobody, until its lease ran out (3 s after the copy landed), holding up the waiters
    behind it; now learning that a hold ended unseen takes its token out at once. (An
    operator's eviction no longer gets this far: the late copy is refused, see below.)"""
    semaphore = Semaphore("late-forced", 1, client=proxied.backend, timeout=30)
    holder = Semaphore("late-forced", 1, client=proxied.backend, timeout=30)
    newcomer = Semaphore("late-forced", 1, client=proxied.backend, timeout=30)
    keys = semaphore._keys_for(proxied.backend)
    held, queued = threading.Event(), threading.Event()

    def hold_until_queued() -> None:
        assert holder.acquire()
        held.set()
        queued.wait(timeout=5)
        holder.release()

    thread = threading.Thread(target=hold_until_queued)
    thread.start()
    assert held.wait(timeout=5)
    withhold_next(proxied, "sem_acquire")
    sent = time.monotonic()

    def set_once_queued() -> None:
        wait_until(lambda: proxied.direct.zcard(keys.queue) == 1, timeout=5, what="queued")
        queued.set()

    watcher = threading.Thread(target=set_once_queued)
    watcher.start()
    assert semaphore.acquire(timeout=5)  # its resent ask queued it; the release admitted it
    watcher.join()
    thread.join()
    assert len(proxied.proxy.withheld) == 1
    hold = semaphore._current_hold()
    assert hold is not None
    assert proxied.direct.zrem(keys.holders, hold.token) == 1  # ended unseen
    assert newcomer.acquire(blocking=False)
    time.sleep(max(0.0, sent + WINDOW - 0.3 - time.monotonic()))
    proxied.proxy.deliver_withheld()  # just within its window: it queues the token again
    landed = time.monotonic()
    [place] = proxied.direct.zrange(keys.queue, 0, -1)
    assert isinstance(place, bytes)
    time.sleep(max(0.0, sent + WINDOW + 0.1 - time.monotonic()))  # no copy can land now
    with pytest.raises(LockLost):
        semaphore.refresh()
    learned = time.monotonic()
    assert landed + 3.0 - learned > 2.0  # the place's lease has over 2 s left
    wait_until(
        lambda: proxied.direct.zscore(keys.queue, place) is None,
        timeout=0.5,
        what="the late copy's place taken out",  # kept until its lease ran out before
    )
    print(f"late copy's place taken out {time.monotonic() - learned:.3f} s after the loss")
    newcomer.release()


def test_a_late_copy_landing_after_a_force_release_does_not_hide_the_eviction(
    proxied: Proxied,
) -> None:
    """An outside review's finding: the holder is evicted by an operator, a newcomer takes
    the name and gives it back, and then a late copy of the evicted holder's resent acquire
    lands within its window. It used to grant the free name to that token again (a fresh
    fence), so the evicted holder's next check found its token holding and never learned of
    the eviction. An acquire now refuses a token the name's recent releases list as
    force-released ({-4, now_ms}), and the holder is told."""
    lock = Lock("late-evicted", client=proxied.backend, timeout=30)
    newcomer = Lock("late-evicted", client=proxied.backend, timeout=30)
    withhold_next(proxied, "lock_acquire")
    assert lock.acquire(blocking=False)  # the resend, on a new connection, got it
    assert len(proxied.proxy.withheld) == 1
    holder_id = lock.holder_id
    assert holder_id is not None
    assert force_release("late-evicted", holder_id, kind="lock", client=proxied.backend)
    assert newcomer.acquire(blocking=False)
    newcomer.release()
    reply = proxied.proxy.deliver_withheld()  # within its window
    assert reply.startswith(b"*2\r\n:-4\r\n"), reply  # refused: the token was evicted
    with pytest.raises(LockLost, match="force-released"):  # (a fresh fence before the fix)
        lock.extend(30)
    assert not is_held(proxied.direct, lock._keys_for(proxied.backend).lock)  # nothing granted


def test_a_late_copy_of_an_evicted_semaphore_holders_ask_is_refused(proxied: Proxied) -> None:
    """The semaphore's twin: the evicted holder's late copy takes no slot and no place, and
    the holder is told of the eviction at its next refresh."""
    semaphore = Semaphore("late-evicted", 1, client=proxied.backend, timeout=30)
    newcomer = Semaphore("late-evicted", 1, client=proxied.backend, timeout=30)
    keys = semaphore._keys_for(proxied.backend)
    withhold_next(proxied, "sem_acquire")
    assert semaphore.acquire(blocking=False)
    assert len(proxied.proxy.withheld) == 1
    hold = semaphore._current_hold()
    assert hold is not None and semaphore.holder_id is not None
    assert force_release(
        "late-evicted", semaphore.holder_id, kind="semaphore", client=proxied.backend
    )
    assert newcomer.acquire(blocking=False)
    newcomer.release()
    reply = proxied.proxy.deliver_withheld()  # within its window
    assert reply.startswith(b"*2\r\n:-4\r\n"), reply  # refused: the token was evicted
    assert proxied.direct.zscore(keys.holders, hold.token) is None
    assert proxied.direct.zscore(keys.queue, hold.token) is None
    with pytest.raises(LockLost, match="force-released"):
        semaphore.refresh()
    assert newcomer.acquire(blocking=False)  # the slot is free
    newcomer.release()


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_waiter_whose_hand_over_is_evicted_before_it_confirms_asks_again_as_a_new_arrival(
    proxied: Proxied, kind: Kind
) -> None:
    """A release hands the name to a waiter that hears of it late (its replies and wake-ups
    take 0.3 s); an operator force-releases that hand-over before the waiter confirms it.
    Its next ask is refused ({-4}: the token is spent); the waiter goes on with a fresh
    token, as a new arrival, and gets the free name: its hold is not the evicted one."""
    direct = Backend(proxied.direct, namespace="late")

    def make(backend: Backend) -> Lock | Semaphore:
        if kind == "lock":  # (no slice: the release hands it over at once)
            return Lock("evicted-handover", client=backend, timeout=30, slice_seconds=0)
        return Semaphore("evicted-handover", 1, client=backend, timeout=30)

    holder, waiter = make(direct), make(proxied.backend)
    keys: Any = waiter._keys_for(proxied.backend)
    assert holder.acquire(blocking=False)
    seen: list[Any] = []

    def wait_then_check() -> None:  # (a hold is its thread's)
        seen.append(waiter.acquire(timeout=10))
        seen.append(waiter.holder_id)
        seen.append(waiter.ensure_held())
        waiter.release()

    thread = threading.Thread(target=wait_then_check)
    thread.start()
    wait_until(lambda: proxied.direct.zcard(keys.queue) == 1, timeout=5, what="queued")
    [first_token] = cast(list[bytes], proxied.direct.zrange(keys.queue, 0, -1))
    evicted = holder_id(first_token.decode())

    def handed_over() -> bool:
        if kind == "lock":
            return bool(proxied.direct.hget(keys.lock, "token") == first_token)
        return proxied.direct.zscore(keys.holders, first_token) is not None

    with proxied.proxy.withholding("delay", 0.3):  # the waiter hears of it 0.3 s late
        # Nothing the waiter sends runs between the hand-over and the eviction (a re-check
        # that ran there would confirm the hand-over before the operator evicts it, which a
        # loaded CI machine once did).
        with proxied.proxy.holding_requests():
            holder.release()  # hands it to the waiter
            assert handed_over()
            assert force_release("evicted-handover", evicted, kind=kind, client=direct)
        time.sleep(0.05)  # (the wake-up message is in the proxy, on its slow way)
    thread.join(timeout=15)
    assert seen[:1] == [True]
    assert seen[1] is not None and seen[1] != evicted  # a fresh token holds
    assert seen[2] > 0  # and its hold is sound
    direct.close()


def _primitive(kind: Kind, name: str, proxied: Proxied, **options: Any) -> Lock | Semaphore:
    if kind == "lock":
        return Lock(name, client=proxied.backend, **options)
    return Semaphore(name, 3, client=proxied.backend, **options)


def _check(primitive: Lock | Semaphore) -> None:
    """What an evicted holder's next call does: a lock's extend, a semaphore's refresh."""
    if isinstance(primitive, Lock):
        primitive.extend(30)
    else:
        primitive.refresh()


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_late_copy_landing_after_the_eviction_left_the_record_is_told_apart_by_its_fence(
    proxied: Proxied, kind: Kind
) -> None:
    """An outside review: three holds of the name end after the eviction, so the name's
    recent releases no longer list it, and the late copy of the evicted holder's acquire is
    granted again (within its window). The grant has a fence (ticket) of its own: the
    evicted holder's next call, which names its hold's fence, is told its hold is gone, and
    the grant nobody believes in is given back at once. Before, the holder's extend or
    refresh kept the late grant alive: it never learned of the eviction."""
    evicted = _primitive(kind, "late-record", proxied, timeout=30)
    other = _primitive(kind, "late-record", proxied, timeout=30)
    withhold_next(proxied, "lock_acquire" if kind == "lock" else "sem_acquire")
    assert evicted.acquire(blocking=False)
    assert len(proxied.proxy.withheld) == 1
    hold = evicted._current_hold()
    assert hold is not None and evicted.holder_id is not None
    assert force_release("late-record", evicted.holder_id, kind=kind, client=proxied.backend)
    for _ in range(3):  # RECENT_RELEASES: the eviction drops out of the record
        assert other.acquire(blocking=False)
        other.release()
    reply = proxied.proxy.deliver_withheld()
    assert reply.startswith(b"*5\r\n:1\r\n"), reply  # granted again, with a fresh fence
    with pytest.raises(LockLost):
        _check(evicted)
    keys: Any = evicted._keys_for(proxied.backend)
    if kind == "lock":
        wait_until(lambda: not is_held(proxied.direct, keys.lock), timeout=2, what="given back")
    else:
        wait_until(
            lambda: proxied.direct.zscore(keys.holders, hold.token) is None,
            timeout=2,
            what="given back",
        )


def test_a_semaphores_late_copy_landing_after_its_record_was_lost_is_told_apart(
    proxied: Proxied,
) -> None:
    """An outside review: the semaphore's record of recent releases went with its holders'
    keys: a newcomer that let a 0.3 s hold run out took the record with it, and the evicted
    holder's late copy, still within its window, was admitted again. The record now lives
    with the info hash, RETENTION_MS past the last hold (see the next test); should it be lost
    all the same (an eviction under memory pressure, a failover), the late admission's ticket
    is not the holder's: the next refresh says the slot is gone."""
    evicted = Semaphore("late-expired", 1, client=proxied.backend, timeout=30)
    newcomer = Semaphore("late-expired", 1, client=proxied.backend, timeout=0.3)
    withhold_next(proxied, "sem_acquire")
    sent = time.monotonic()
    assert evicted.acquire(blocking=False)
    assert evicted.holder_id is not None
    assert force_release(
        "late-expired", evicted.holder_id, kind="semaphore", client=proxied.backend
    )
    assert newcomer.acquire(blocking=False)  # and never released: it runs out
    keys = evicted._keys_for(proxied.backend)
    wait_until(lambda: newcomer.count() == 0, timeout=3, what="the newcomer's hold to run out")
    proxied.direct.delete(keys.info, keys.holders)  # the record lost
    assert time.monotonic() < sent + WINDOW - 0.2  # the copy is still within its window
    reply = proxied.proxy.deliver_withheld()
    assert reply.startswith(b"*5\r\n:1\r\n"), reply
    with pytest.raises(LockLost):
        evicted.refresh()


def test_a_semaphores_late_copy_is_refused_while_the_record_of_its_eviction_lives(
    proxied: Proxied,
) -> None:
    """The same, the keys as the scripts keep them: the record of the eviction outlives the
    newcomer's short hold (the info hash lives RETENTION_MS past the last hold, whatever the
    holders' TTL), so the late copy is refused as evicted (-4) and admits nobody. (It lived
    as long as the holders plus 1 s before: the copy landing 1.4 s after the newcomer's grant
    was admitted.)"""
    evicted = Semaphore("late-kept", 1, client=proxied.backend, timeout=30)
    newcomer = Semaphore("late-kept", 1, client=proxied.backend, timeout=0.3)
    withhold_next(proxied, "sem_acquire")
    sent = time.monotonic()
    assert evicted.acquire(blocking=False)
    assert evicted.holder_id is not None
    assert force_release("late-kept", evicted.holder_id, kind="semaphore", client=proxied.backend)
    assert newcomer.acquire(blocking=False)  # and never released: it runs out
    granted = time.monotonic()
    wait_until(lambda: time.monotonic() > granted + 1.4, timeout=3, what="1.4 s")
    assert time.monotonic() < sent + WINDOW - 0.05  # the copy is still within its window
    reply = proxied.proxy.deliver_withheld()
    assert reply.startswith(b"*2\r\n:-4\r\n"), reply
    assert newcomer.count() == 0
    with pytest.raises(LockLost):
        evicted.refresh()


def test_an_auto_renewed_evicted_holder_does_not_renew_a_late_grant_of_its_token(
    proxied: Proxied,
) -> None:
    """The same with the renewer: its renewals name the hold's fence, so the first one after
    the late grant finds the hold lost instead of keeping the late grant alive (an outside
    review saw it held, renewed, 8 s later)."""
    evicted = Lock("late-renewed", client=proxied.backend, timeout=1.5, auto_renew=True)
    other = Lock("late-renewed", client=proxied.backend, timeout=30)
    withhold_next(proxied, "lock_acquire")
    assert evicted.acquire(blocking=False)
    hold = evicted._current_hold()
    assert hold is not None and evicted.holder_id is not None
    assert force_release("late-renewed", evicted.holder_id, kind="lock", client=proxied.backend)
    for _ in range(3):
        assert other.acquire(blocking=False)
        other.release()
    reply = proxied.proxy.deliver_withheld()
    assert reply.startswith(b"*5\r\n:1\r\n"), reply
    assert hold.lost_event.wait(2), "the renewal kept the late grant"
    wait_until(lambda: other.acquire(blocking=False), timeout=2, what="the name free again")
    other.release()


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_an_evicted_holders_release_of_a_late_grant_reports_the_loss(
    proxied: Proxied, kind: Kind
) -> None:
    """An outside review: past the record, the evicted holder's release() found its token
    holding (the late grant) and released it silently: the holder never learned that its
    work ran unprotected. The release names its hold's fence (ticket): it still gives the
    late grant back, and says the hold was gone."""
    evicted = _primitive(kind, "late-release", proxied, timeout=30)
    other = _primitive(kind, "late-release", proxied, timeout=30)
    withhold_next(proxied, "lock_acquire" if kind == "lock" else "sem_acquire")
    assert evicted.acquire(blocking=False)
    assert evicted.holder_id is not None
    assert force_release("late-release", evicted.holder_id, kind=kind, client=proxied.backend)
    for _ in range(3):
        assert other.acquire(blocking=False)
        other.release()
    assert proxied.proxy.deliver_withheld().startswith(b"*5\r\n:1\r\n")  # granted again
    # (The record no longer lists the eviction: the release says what it can know.)
    with pytest.raises(LockLost, match="expired or was removed"):
        evicted.release()
    assert other.acquire(blocking=False)  # the late grant was given back by that release
    other.release()


def test_an_evicted_token_is_refused_while_another_caller_holds_the_name(
    make_server: Any,
) -> None:
    """An evicted token's acquire (its holder asking again, or a late copy) is refused (-4)
    also while someone else holds the name, and takes no place in the queue: it must learn of
    its eviction, not wait for a name it will never be granted."""
    server = make_server()
    with server.client() as client:
        backend = Backend(client, namespace="evicted-busy")
        keys = backend.keys.lock("busy")
        evicted, other = new_token(), new_token()
        assert int(backend.run_many([lock_calls.acquire_call(keys, evicted, 30_000, "{}")])[0][0])
        forced = lock_calls.release_call(keys, holder_id(evicted), forced=True)
        assert backend.run_many([forced]) == [1]
        assert int(backend.run_many([lock_calls.acquire_call(keys, other, 30_000, "{}")])[0][0])
        ask = lock_calls.acquire_call(keys, evicted, 30_000, "{}", queue=True, lease_ms=3_000)
        assert isinstance(lock_calls.decode_acquire(backend.run_many([ask])[0]), Evicted)
        assert client.zscore(keys.queue, evicted) is None

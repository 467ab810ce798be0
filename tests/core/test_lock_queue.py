"""Blocked lock waiters queue in arrival order and a release hands the lock to the first."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from django_redis_locks import Lock
from django_redis_locks.core import Backend
from django_redis_locks.core.protocol import lock_calls as protocol
from django_redis_locks.core.protocol.holder import holder_id
from django_redis_locks.core.protocol.keys import LockKeys
from django_redis_locks.core.protocol.replies import Acquired, Contended
from django_redis_locks.inspection import get_lock
from tests.harness.acl import silent_channel
from tests.harness.servers import wait_until
from tests.helpers import held_ttl_ms, server_ms


def queued(client: redis.Redis, backend: Backend, name: str) -> int:
    """How many wait on ``name``, read through ``client`` (the test's unrestricted client: in
    the ACL mode the library's user may not run ZCARD outside its scripts)."""
    return int(client.zcard(backend.keys.lock(name).queue))


def queue_of(client: redis.Redis, backend: Backend, name: str, count: int) -> Callable[[], bool]:
    return lambda: queued(client, backend, name) == count


def ask(backend: Backend, keys: LockKeys, token: str, lease_ms: int, **options: Any) -> object:
    """One blocking caller's lock_acquire (it queues if not granted), by script."""
    call = protocol.acquire_call(
        keys,
        token,
        10_000,
        "{}",
        queue=True,
        lease_ms=lease_ms,
        channel=silent_channel(backend),
        **options,
    )
    return protocol.decode_acquire(backend.run_many([call])[0])


def evalsha_calls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def test_ten_waiters_get_the_lock_in_arrival_order(
    backend: Backend, redis_client: redis.Redis
) -> None:
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
        wait_until(queue_of(redis_client, backend, "fifo", index + 1), timeout=5, what="queued")
    holder.release()
    for thread in threads:
        thread.join(timeout=30)
    assert order == list(range(10))
    assert queued(redis_client, backend, "fifo") == 0


def test_a_release_hands_the_lock_to_a_live_waiter_which_confirms_it_with_one_script(
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
    wait_until(queue_of(client, backend, "baton", 1), timeout=5, what="queued")
    holder.release()
    # Woken by the release's message: within milliseconds (the re-check would be at 10 s).
    wait_until(lambda: bool(acquired), timeout=2, what="the waiter to have the lock")
    # Two scripts more: the holder's release, which handed the lock to the waiter for the
    # confirmation window and woke it, and the waiter's confirmation, whose reply alone makes
    # it the holder (for its full TTL): no re-check, no polling.
    assert evalsha_calls(client) - before == 4
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


def test_a_waiter_that_gives_up_leaves_the_queue(
    backend: Backend, redis_client: redis.Redis
) -> None:
    holder = Lock("patience", client=backend, timeout=10)
    assert holder.acquire()
    started = time.monotonic()
    assert not Lock("patience", client=backend).acquire(timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 2
    assert queued(redis_client, backend, "patience") == 0
    holder.release()
    assert not holder.locked()  # nobody was handed the lock


def take_and_release(lock: Lock, timeout: float, results: dict[str, bool], key: str) -> None:
    results[key] = lock.acquire(timeout=timeout)
    if results[key]:
        lock.release()


def test_a_waiter_handed_the_lock_while_giving_up_passes_it_on(
    backend: Backend, redis_client: redis.Redis
) -> None:
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
        wait_until(queue_of(redis_client, backend, "race", 1), timeout=5, what="the quitter queued")
        patient = threading.Thread(
            target=take_and_release,
            args=(Lock("race", client=backend, timeout=10), 10, results, "patient"),
        )
        patient.start()
        wait_until(
            queue_of(redis_client, backend, "race", 2), timeout=5, what="the patient one queued"
        )
        # Release before, about at, or after the quitter's 0.2 s run out: every ordering of
        # the give-up and the hand-over must leave the lock with the patient waiter.
        time.sleep(0.01 * attempt)  # varies where the release falls; not a wait for a state
        holder.release()
        quitter.join(timeout=10)
        patient.join(timeout=10)
        assert results["patient"] is True
        assert not holder.locked() and queued(redis_client, backend, "race") == 0


def test_a_hand_over_lasts_the_waiters_ttl_when_shorter_than_the_window(
    backend: Backend, redis_client: redis.Redis
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
    before = server_ms(redis_client)
    holder.release()  # hands the lock to the dead waiter
    after = server_ms(redis_client)
    expires = int(redis_client.hget(keys.lock, "expires") or 0)
    assert redis_client.hget(keys.lock, "token") == b"dead-token"
    # for 500 ms from the release's server time (between the two readings, however slow)
    assert before + 500 <= expires <= after + 500
    successor = Lock("orphan", client=backend, timeout=5)
    assert not successor.acquire(blocking=False)


def test_within_its_slice_the_holder_takes_the_lock_back_then_hands_it_on(
    backend: Backend, redis_client: redis.Redis
) -> None:
    holder = Lock("slices", client=backend, timeout=10, slice_seconds=1.0, blocking=False)
    assert holder.acquire()
    # (After the acquire: the slice's end, read from the server's clock during it, is at most
    # a second from here; measured before it, a slow first call would end the slice later.)
    sliced_at = time.monotonic()
    got: list[float] = []
    waiter = threading.Thread(
        target=lambda: got.append(
            time.monotonic() if Lock("slices", client=backend).acquire(timeout=10) else -1
        )
    )
    waiter.start()
    wait_until(queue_of(redis_client, backend, "slices", 1), timeout=5, what="queued")
    retaken = 0
    while (slice_left := 1.0 - (time.monotonic() - sliced_at)) > 0.5:
        holder.release()
        assert holder.acquire(), f"retaking within the slice failed ({slice_left:.3f} s left)"
        retaken += 1
    assert retaken > 0 and queued(redis_client, backend, "slices") == 1
    wait_until(lambda: time.monotonic() - sliced_at > 1.0, timeout=5, what="the slice's end")
    released_at = time.monotonic()
    holder.release()  # after the slice: handed to the waiter
    assert not holder.acquire()
    waiter.join(timeout=10)
    assert got and got[0] >= released_at


def test_a_slice_kept_lock_goes_to_the_waiter_when_the_slice_ends(
    backend: Backend, redis_client: redis.Redis
) -> None:
    holder = Lock("kept", client=backend, timeout=10, slice_seconds=0.3)
    assert holder.acquire()
    waiter = Lock("kept", client=backend, timeout=10)
    result: list[float] = []
    thread = threading.Thread(
        target=lambda: result.append(time.monotonic() if waiter.acquire(timeout=10) else -1)
    )
    thread.start()
    wait_until(queue_of(redis_client, backend, "kept", 1), timeout=5, what="queued")
    released_at = time.monotonic()
    holder.release()  # within the slice: kept for the holder, which does not come back
    thread.join(timeout=10)
    assert result and 0 < result[0] - released_at < 0.3 + 0.2  # at the slice's end, not later


def test_without_slices_every_release_hands_the_lock_on(
    backend: Backend, redis_client: redis.Redis
) -> None:
    holder = Lock("strict", client=backend, timeout=10, slice_seconds=0, blocking=False)
    assert holder.acquire()
    thread = threading.Thread(target=lambda: Lock("strict", client=backend).acquire(timeout=10))
    thread.start()
    wait_until(queue_of(redis_client, backend, "strict", 1), timeout=5, what="queued")
    holder.release()
    assert not holder.acquire()  # already the waiter's
    thread.join(timeout=10)


def test_a_token_granted_within_its_sessions_slice_leaves_the_queue(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """A session's queued token (here: queued behind another waiter while a token of the same
    session held the lock) that takes the lock back within the session's slice leaves the
    queue: it holds, so it no longer waits, and the waiter behind it is next."""
    keys = backend.keys.lock("reserved")

    def acquire(token: str, session: str) -> object:
        return ask(backend, keys, token, 5_000, session=session, slice_ms=5_000)

    assert not isinstance(acquire("held-by-s1", "s1"), Contended)
    assert isinstance(acquire("waits-s2", "s2"), Contended)
    second = acquire("waits-s1", "s1")
    assert isinstance(second, Contended) and second.position == 2
    release = protocol.release_call(keys, "held-by-s1")
    assert backend.run_many([release]) == [1]  # within the slice: reserved
    assert not isinstance(acquire("waits-s1", "s1"), Contended)  # the session takes it back
    assert redis_client.hget(keys.lock, "token") == b"waits-s1"
    assert redis_client.zrange(keys.queue, 0, -1) == [b"waits-s2"]


def test_a_release_drops_an_expired_place_behind_a_live_head(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """Expired places are dropped wherever they are in the queue, not only at its head: a
    waiter that queued second and never came back is gone after the next release, while the
    live first waiter is handed the lock."""
    keys = backend.keys.lock("behind")

    def queue(token: str, lease_ms: int) -> object:
        return ask(backend, keys, token, lease_ms)

    assert not isinstance(queue("holder", 5_000), Contended)
    assert isinstance(queue("live", 10_000), Contended)
    assert isinstance(queue("dead", 50), Contended)
    # The live waiter comes back (as it does within its lease): the queue's keys live as long
    # as the last lease given, not only the dead one's 50 ms (x 2).
    assert isinstance(queue("live", 10_000), Contended)
    wait_until(lambda: _lease_over(redis_client, keys, "dead"), timeout=5, what="its lease's end")
    assert backend.run_many([protocol.release_call(keys, "holder")]) == [1]
    assert redis_client.hget(keys.lock, "token") == b"live"  # handed over
    assert redis_client.zscore(keys.queue, "dead") is None
    assert redis_client.zscore(keys.leases, "dead") is None
    assert not redis_client.hexists(keys.waiters, "dead")


def _lease_over(client: redis.Redis, keys: LockKeys, token: str) -> bool:
    seconds, micros = client.time()
    lease = client.zscore(keys.leases, token)
    return lease is not None and lease < seconds * 1000 + micros // 1000


#: Reserves the lock for ARGV[1]'s session until ARGV[2] milliseconds from now (server time),
#: as a release within a slice that ends then would.
RESERVE = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ms = string.format('%.0f', now_ms + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'token', 'gone', 'expires', '0', 'session', ARGV[1],
    'reserved', until_ms, 'slice_end', until_ms)
return now_ms
"""


def test_a_session_that_takes_its_lock_back_in_its_slices_last_millisecond_keeps_that_slice(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """Taking a reserved lock back does not start a new slice: the slice goes on to its end,
    even when one millisecond of it is left."""
    keys = backend.keys.lock("last-slice-ms")
    Lock("warm-up", client=backend).acquire(blocking=False)  # the scripts are loaded
    same_ms = 0
    for index in range(50):
        call = protocol.acquire_call(keys, f"t{index}", 10_000, "{}", session="s1", slice_ms=5_000)
        with redis_client.pipeline(transaction=True) as pipe:
            pipe.eval(RESERVE, 1, keys.lock, "s1", 1)
            pipe.evalsha(*call.evalsha_args())
            reserved_at, reply = pipe.execute()
        granted = protocol.decode_acquire(reply)
        assert isinstance(granted, Acquired)
        if granted.server_now_ms == reserved_at:  # one millisecond of the slice was left
            same_ms += 1
            assert int(redis_client.hget(keys.lock, "slice_end") or 0) == reserved_at + 1
        redis_client.delete(keys.lock)
    assert same_ms >= 5, f"only {same_ms} of 50 tries ran in the reservation's millisecond"


def test_a_session_takes_its_lock_back_in_its_reservations_last_millisecond_past_a_waiter(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """A lock reserved for a session's slice is that session's to the reservation's end, even
    while a waiter is due: in the last millisecond the session is granted, not refused while
    the lock goes to the waiter (lock_acquire looks at the queue only once no reservation is
    left)."""
    keys = backend.keys.lock("reserved-waiter-ms")
    Lock("warm-up", client=backend).acquire(blocking=False)  # the scripts are loaded
    channel = silent_channel(backend)
    same_ms = 0
    for index in range(50):
        redis_client.delete(keys.lock, keys.queue, keys.waiters, keys.leases)
        redis_client.eval(RESERVE, 1, keys.lock, "s1", 1_000)
        queued = protocol.acquire_call(
            keys, f"w{index}", 10_000, "{}", queue=True, lease_ms=10_000, channel=channel
        )
        assert isinstance(protocol.decode_acquire(backend.run_many([queued])[0]), Contended)
        reserved_at, outcome = reserve_then_acquire(redis_client, keys, 1, "s1", f"t{index}")
        if getattr(outcome, "server_now_ms", None) == reserved_at:  # 1 ms of it was left
            same_ms += 1
            assert isinstance(outcome, Acquired), f"try {index}: {outcome}"
    assert same_ms >= 5, f"only {same_ms} of 50 tries ran in the reservation's millisecond"


def reserve_then_acquire(
    client: redis.Redis, keys: LockKeys, left_ms: int, session: str, token: str
) -> tuple[int, Any]:
    """Reserve the lock for session s1 with ``left_ms`` to go, then run ``session``'s acquire,
    in one MULTI; the reservation's start (server ms) and the decoded reply."""
    call = protocol.acquire_call(keys, token, 10_000, "{}", session=session, slice_ms=5_000)
    with client.pipeline(transaction=True) as pipe:
        pipe.eval(RESERVE, 1, keys.lock, "s1", left_ms)
        pipe.evalsha(*call.evalsha_args())
        reserved_at, reply = pipe.execute()
    return int(reserved_at), protocol.decode_acquire(reply)


def test_another_session_is_refused_in_a_reservations_last_millisecond(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """A lock reserved for a session's slice stays its own to the end: another session's
    acquire in the reservation's last millisecond is refused."""
    keys = backend.keys.lock("reserved-last-ms")
    Lock("warm-up", client=backend).acquire(blocking=False)  # the scripts are loaded
    same_ms = 0
    for index in range(50):
        reserved_at, outcome = reserve_then_acquire(redis_client, keys, 1, "s2", f"t{index}")
        if getattr(outcome, "server_now_ms", None) == reserved_at:  # 1 ms of it was left
            same_ms += 1
            assert isinstance(outcome, Contended), f"try {index}: {outcome}"
        redis_client.delete(keys.lock)
    assert same_ms >= 5, f"only {same_ms} of 50 tries ran in the reservation's millisecond"


def test_a_session_taking_its_lock_as_its_reservation_ends_starts_a_new_slice(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """In the very millisecond a reservation ends, the lock is free: the session that takes
    it (its own or not) gets a slice of its own, not the one that just ended."""
    keys = backend.keys.lock("reserved-ends-ms")
    Lock("warm-up", client=backend).acquire(blocking=False)  # the scripts are loaded
    same_ms = 0
    for index in range(50):
        reserved_at, outcome = reserve_then_acquire(redis_client, keys, 0, "s1", f"t{index}")
        assert isinstance(outcome, Acquired), f"try {index}: {outcome}"
        if outcome.server_now_ms == reserved_at:  # the reservation ended this millisecond
            same_ms += 1
            assert int(redis_client.hget(keys.lock, "slice_end") or 0) == reserved_at + 5_000
        redis_client.delete(keys.lock)
    assert same_ms >= 5, f"only {same_ms} of 50 tries ran in the reservation's millisecond"


def test_a_confirmed_hand_over_keeps_the_key_alive_as_long_as_the_hold(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """A waiter with an hour's TTL is handed the lock for the hand-over window; its
    confirmation makes the hold last the hour, and the hash must outlive it (and the retention
    after it): a hash that expired with the window's expiry would free a held lock."""
    keys = backend.keys.lock("handed-far")
    holder = Lock("handed-far", client=backend, timeout=10, slice_seconds=0)
    assert holder.acquire(blocking=False)
    call = protocol.acquire_call(
        keys,
        "far-waiter",
        3_600_000,
        "{}",
        queue=True,
        lease_ms=10_000,
        channel=silent_channel(backend),
    )
    assert isinstance(protocol.decode_acquire(backend.run_many([call])[0]), Contended)
    holder.release()  # hands the lock to the waiter for the window
    assert redis_client.hget(keys.lock, "token") == b"far-waiter"
    confirmed = protocol.decode_acquire(backend.run_many([call])[0])
    assert isinstance(confirmed, Acquired) and confirmed.ttl_ms == 3_600_000
    hold_ms = held_ttl_ms(redis_client, keys.lock) or 0
    assert hold_ms > 3_590_000
    assert redis_client.pttl(keys.lock) >= hold_ms


@pytest.mark.parametrize(("dead", "handed"), [(31, True), (33, False)])
def test_a_release_looks_past_up_to_thirty_two_dead_places(
    backend: Backend, redis_client: redis.Redis, dead: int, handed: bool
) -> None:
    """Dead places cost bounded work: a release drops up to LOCK_PRUNE (16) places whose lease
    ran out at once, then looks at up to 16 more heads of the queue; past that it leaves the
    lock free (as if nobody waited) and later scripts drop more. A live waiter behind 31 dead
    places is handed the lock; behind 33, the next script does it."""
    keys = backend.keys.lock(f"dead-{dead}")

    def queue(token: str, lease_ms: int) -> object:
        return ask(backend, keys, token, lease_ms)

    holder = Lock(f"dead-{dead}", client=backend, timeout=10, slice_seconds=0)
    assert holder.acquire(blocking=False)
    for index in range(dead):
        assert isinstance(queue(f"dead{index}", 100), Contended)
    assert isinstance(queue("live", 10_000), Contended)
    wait_until(lambda: _lease_over(redis_client, keys, f"dead{dead - 1}"), timeout=5, what="leases")
    holder.release()
    assert (redis_client.hget(keys.lock, "token") == b"live") is handed
    if not handed:
        assert isinstance(queue("live", 10_000), Acquired)  # its next ask finds it first


QUEUE_READS = ("exists", "zrange", "zscore", "hget")  # (ZRANGEBYSCORE: the registry too)


def queue_reads(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in QUEUE_READS)


def test_an_uncontended_cycle_never_looks_at_the_queue(make_server) -> None:
    """The lock hash says whether anyone may wait (q): an acquire and release with nobody
    queued run no command on the queue's keys, and once waiters came and went, the first look
    that finds the queue empty clears the flag. Counted from the server's command statistics."""
    server = make_server()
    with server.client(socket_timeout=5) as client:
        backend = Backend(client, namespace="lean")
        lock = Lock("lean", client=backend, timeout=30)
        assert lock.acquire(blocking=False)  # (the process's first call reads what it checks)
        lock.release()
        before = queue_reads(client)
        for _ in range(5):
            assert lock.acquire(blocking=False)
            lock.release()
        assert queue_reads(client) == before

        assert lock.acquire(blocking=False)
        waiter = Lock("lean", client=backend, timeout=30)
        assert not waiter.acquire(timeout=0.3)  # queued, then gave up: the queue is empty
        key = backend.keys.lock("lean").lock
        assert client.hget(key, "q") == b"1"
        lock.release()  # finds the queue empty: q goes
        assert client.hget(key, "q") is None
        before = queue_reads(client)
        for _ in range(5):
            assert lock.acquire(blocking=False)
            lock.release()
        assert queue_reads(client) == before


def test_a_waiter_behind_more_dead_places_than_one_look_drops_is_not_bypassed(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """A release drops a bounded number of dead places (lib/lock, LOCK_PRUNE); when the live
    waiter lies beyond them, the lock is left free, but the queue stays flagged (q), so that
    the next acquire looks on and hands the lock to that waiter instead of taking it."""
    keys = backend.keys.lock("crowd")
    holder = Lock("crowd", client=backend, timeout=10, slice_seconds=0)
    assert holder.acquire()
    asked = server_ms(redis_client)
    for i in range(40):
        ask(backend, keys, f"dead-{i}", 200)
    ask(backend, keys, "live", 60_000)
    wait_until(lambda: server_ms(redis_client) > asked + 400, timeout=5, what="dead leases")
    holder.release()
    assert redis_client.hget(keys.lock, "token") is None, "one look dropped them all"
    assert redis_client.hget(keys.lock, "q") == b"1"
    newcomer = Lock("crowd", client=backend, timeout=10)
    assert not newcomer.acquire(blocking=False)
    assert redis_client.hget(keys.lock, "token") == b"live"


def test_a_release_within_its_slice_tells_the_first_waiter_once_when_to_try(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """A release while its session's slice runs keeps the lock for that session and tells the
    first waiter, on the waiter's own channel, how long the slice has left
    ("<member>#<holder id>|<ms>"); a second release in the same slice tells it nothing more
    (lib/lock, lock_release: once per slice). Read from a subscription to that channel."""
    keys = backend.keys.lock("told")
    channel = f"{backend.keys.channel}:probe"

    def run(call: Any) -> Any:
        return backend.run_many([call])[0]

    def take() -> object:
        call = protocol.acquire_call(keys, "holder", 10_000, "{}", session="s1", slice_ms=5_000)
        return protocol.decode_acquire(run(call))

    assert isinstance(take(), Acquired)
    queued = protocol.acquire_call(
        keys, "waiter", 10_000, "{}", queue=True, lease_ms=10_000, channel=channel
    )
    assert isinstance(protocol.decode_acquire(run(queued)), Contended)
    with redis_client.pubsub() as subscription:
        subscription.subscribe(channel)
        assert subscription.get_message(timeout=5)["type"] == "subscribe"
        assert run(protocol.release_call(keys, "holder")) == 1
        told = subscription.get_message(timeout=5)
        assert told is not None and told["type"] == "message", told
        member, _, rest = told["data"].decode().partition("#")
        hid, _, left = rest.partition("|")
        assert (member, hid) == ("lock:told", holder_id("waiter"))
        assert 0 < int(left) <= 5_000
        assert isinstance(take(), Acquired)  # the session takes it back within its slice
        assert run(protocol.release_call(keys, "holder")) == 1
        assert subscription.get_message(timeout=0.5) is None  # told once per slice

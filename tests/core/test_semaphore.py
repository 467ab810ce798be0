"""The fair counting Semaphore in one process: limit, fairness, wake-ups, expiry, the API."""

from __future__ import annotations

import asyncio
import inspect
import math
import statistics
import threading
import time
from collections.abc import Callable

import pytest
import redis
from asgiref.sync import iscoroutinefunction

from django_redis_locks import (
    InvalidArgument,
    InvalidArgumentType,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    Semaphore,
    SemaphoreFull,
    SemaphoreLimitMismatch,
)
from django_redis_locks.core import Backend
from django_redis_locks.core.protocol import semaphore_calls as protocol
from django_redis_locks.core.protocol.holder import holder_id
from django_redis_locks.core.protocol.lock_calls import HANDOVER_WINDOW_MS
from django_redis_locks.core.protocol.replies import Acquired, Contended
from django_redis_locks.core.semaphore import MAX_LIMIT
from django_redis_locks.inspection import SemaphoreInfo, get_semaphore
from tests.harness.acl import silent_channel
from tests.harness.servers import wait_until
from tests.helpers import server_ms

SYNC_TWINS = ["acquire", "release", "refresh", "held", "count", "holders", "ensure_held"]


def token_of(semaphore: Semaphore) -> str:
    hold = semaphore._current_hold()
    assert hold is not None
    return hold.token


def info_of(backend: Backend, name: str) -> SemaphoreInfo:
    info = get_semaphore(name, client=backend)
    assert info is not None
    return info


def waiting(backend: Backend, name: str) -> int:
    info = get_semaphore(name, client=backend)
    return 0 if info is None else info.waiting


def queued(backend: Backend, name: str, count: int) -> Callable[[], bool]:
    return lambda: waiting(backend, name) == count


def queue_raw_waiter(backend: Backend, name: str, token: str) -> int:
    """Queue ``token`` for a slot of ``name`` (limit 1, a 2 s TTL, its place leased 5 s) with
    one raw script call, as a blocking waiter that then sleeps until told (nobody listens on
    its channel); returns its place in the queue."""
    keys = backend.keys.semaphore(name)
    call = protocol.acquire_call(
        keys, token, 1, 2_000, "{}", queue=True, lease_ms=5_000, channel=silent_channel(backend)
    )
    reply = protocol.decode_acquire(backend.client.evalsha(*call.evalsha_args()))
    assert isinstance(reply, Contended)
    return reply.position


def evalsha_calls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def test_limit_is_enforced_and_reported(backend: Backend) -> None:
    first = Semaphore("pool", 2, client=backend, timeout=5, metadata={"label": "jobs.first"})
    second = Semaphore("pool", 2, client=backend, timeout=5)
    third = Semaphore("pool", 2, client=backend, timeout=5, blocking=False)
    assert first.acquire() and second.acquire()
    assert not third.acquire()
    assert first.count() == 2 and first.held() and not third.held()
    holders = {h.holder_id: h for h in first.holders()}
    assert set(holders) == {first.holder_id, second.holder_id}
    mine = holders[holder_id(token_of(first))]
    assert mine.label == "jobs.first" and mine.kind == "semaphore"
    assert 4 < mine.ttl <= 5
    assert 4.9 < (mine.expires_at - mine.acquired_at).total_seconds() <= 5.0
    first.release()
    assert first.count() == 1 and not first.held()
    assert third.acquire()
    second.release()
    third.release()
    assert first.count() == 0


def test_context_manager_raises_semaphore_full_with_retry_after(backend: Backend) -> None:
    holder = Semaphore("ctx", 1, client=backend, timeout=3)
    with holder:
        assert holder.held()
        with (
            pytest.raises(SemaphoreFull) as info,
            Semaphore("ctx", 1, client=backend, blocking=False),
        ):
            pytest.fail("the body ran without a slot")
        assert isinstance(info.value, LockNotAcquired)
        # Just taken, no history: as long again as it has run, at least 1 s.
        assert info.value.retry_after is not None and 1.0 <= info.value.retry_after < 2
    assert holder.count() == 0


@pytest.mark.parametrize(
    ("limit", "error"),
    [
        (0, InvalidArgument),
        (-1, InvalidArgument),
        (MAX_LIMIT + 1, InvalidArgument),
        (10**12, InvalidArgument),
        (1.5, InvalidArgumentType),
        (2.0, InvalidArgumentType),
        (math.nan, InvalidArgumentType),
        (True, InvalidArgumentType),
        ("3", InvalidArgumentType),
        (None, InvalidArgumentType),
    ],
)
def test_bad_limits_raise_and_write_nothing(backend: Backend, redis_client, limit, error) -> None:
    with pytest.raises(error) as info:
        Semaphore("bad", limit, client=backend)
    assert info.value.argument == "limit"
    assert isinstance(info.value, ValueError if error is InvalidArgument else TypeError)
    assert not list(redis_client.scan_iter(match=f"{backend.keys.namespace}:*"))


def test_a_different_limit_is_refused_while_in_use_and_changes_nothing(
    backend: Backend, redis_client
) -> None:
    two = Semaphore("limits", 2, client=backend, timeout=5)
    three = Semaphore("limits", 3, client=backend, timeout=5)
    assert two.acquire()
    keys = backend.keys.semaphore("limits")
    before = redis_client.zrange(keys.holders, 0, -1, withscores=True)
    with pytest.raises(SemaphoreLimitMismatch) as info:
        three.acquire()
    assert (info.value.stored_limit, info.value.limit) == (2, 3)
    assert "limit 2" in str(info.value) and "not 3" in str(info.value)
    assert redis_client.zrange(keys.holders, 0, -1, withscores=True) == before
    assert info_of(backend, "limits").limit == 2
    two.release()
    # Once nobody holds or waits, the next acquire sets the limit anew.
    assert three.acquire()
    assert info_of(backend, "limits").limit == 3
    with pytest.raises(SemaphoreLimitMismatch):
        two.acquire(blocking=False)
    three.release()


def test_ten_waiters_are_admitted_in_arrival_order(backend: Backend) -> None:
    holder = Semaphore("fifo", 1, client=backend, timeout=10)
    assert holder.acquire()
    order: list[int] = []
    threads = []
    for index in range(10):

        def wait_for_slot(index: int = index) -> None:
            semaphore = Semaphore("fifo", 1, client=backend, timeout=10)
            assert semaphore.acquire(timeout=30)
            order.append(index)
            semaphore.release()

        thread = threading.Thread(target=wait_for_slot)
        thread.start()
        threads.append(thread)
        wait_until(queued(backend, "fifo", index + 1), timeout=5, what="queued")
    holder.release()
    for thread in threads:
        thread.join(timeout=30)
    assert order == list(range(10))


def test_a_release_hands_the_slot_to_the_queued_waiter_not_to_a_latecomer(
    backend: Backend,
) -> None:
    holder = Semaphore("overtake", 1, client=backend, timeout=10)
    assert holder.acquire()
    # A waiter that queued (its place lasts 5 s) and sleeps until told.
    assert queue_raw_waiter(backend, "overtake", "queued-token") == 1
    holder.release()  # admits the queued waiter there and then
    latecomer = Semaphore("overtake", 1, client=backend, timeout=10, blocking=False)
    assert not latecomer.acquire()
    [admitted] = latecomer.holders()
    assert admitted.holder_id == holder_id("queued-token")
    # Admitted for the confirmation window only (the waiter asked for 2 s): a waiter that
    # died while queued keeps the slot no longer; a live one confirms it when woken.
    assert 0.5 < admitted.ttl <= HANDOVER_WINDOW_MS / 1000


def test_a_try_that_admits_the_queued_waiter_gives_the_holders_key_an_expiry(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """Every path of sem_acquire that writes ends in semaphore_keep, an admission too. Here
    the holders key is gone (as a server that evicts keys may drop it): no expired holder is
    left to drop, and a try that finds the slot free admits the queued waiter, which makes
    the key anew (a ZADD makes it without an expiry): the try must give it one."""
    keys = backend.keys.semaphore("evicted")
    holder = Semaphore("evicted", 1, client=backend, timeout=10)
    assert holder.acquire()
    assert queue_raw_waiter(backend, "evicted", "queued-token") == 1
    assert redis_client.delete(keys.holders) == 1  # evicted: the slot is free, unannounced
    latecomer = Semaphore("evicted", 1, client=backend, timeout=10, blocking=False)
    assert not latecomer.acquire()  # the free slot goes to the queued waiter
    [admitted] = latecomer.holders()
    assert admitted.holder_id == holder_id("queued-token")
    ends = redis_client.zscore(keys.holders, "queued-token")
    assert ends is not None
    for key in keys.state:  # -1: a key with no expiry, left for ever if nobody comes back
        assert redis_client.pttl(key) > 0, key
    listed = redis_client.zscore(keys.registry.expiry, keys.member)
    assert listed is not None and listed >= ends  # the registry lists it while it holds
    with pytest.raises(LockLost):  # its slot went with the key
        holder.release()


def test_a_queued_waiter_that_does_not_come_back_loses_its_place(backend: Backend) -> None:
    keys = backend.keys.semaphore("lapsed")
    holder = Semaphore("lapsed", 1, client=backend, timeout=10)
    assert holder.acquire()
    queued = protocol.acquire_call(
        keys,
        "gone-token",
        1,
        10_000,
        "{}",
        queue=True,
        lease_ms=300,
        channel=silent_channel(backend),
    )
    backend.client.evalsha(*queued.evalsha_args())
    assert waiting(backend, "lapsed") == 1
    wait_until(lambda: waiting(backend, "lapsed") == 0, timeout=5, what="its lease to run out")
    holder.release()
    latecomer = Semaphore("lapsed", 1, client=backend, timeout=10, blocking=False)
    assert latecomer.acquire()  # nobody queued any more: the slot is free for whoever asks
    latecomer.release()


def test_a_waiter_that_gives_up_leaves_the_queue(backend: Backend) -> None:
    holder = Semaphore("give-up", 1, client=backend, timeout=10)
    assert holder.acquire()
    started = time.monotonic()
    assert not Semaphore("give-up", 1, client=backend).acquire(timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 2
    assert waiting(backend, "give-up") == 0
    holder.release()
    assert get_semaphore("give-up", client=backend) is None


def test_release_wakes_the_next_waiter_within_milliseconds(backend: Backend) -> None:
    holder = Semaphore("handoff", 1, client=backend, timeout=10)
    latencies: list[float] = []
    for _ in range(30):
        assert holder.acquire()
        acquired_at: list[float] = []

        def wait_for_it(acquired_at: list[float] = acquired_at) -> None:
            semaphore = Semaphore("handoff", 1, client=backend, timeout=10)
            assert semaphore.acquire(timeout=10)
            acquired_at.append(time.perf_counter())
            semaphore.release()

        thread = threading.Thread(target=wait_for_it)
        thread.start()
        wait_until(lambda: waiting(backend, "handoff") == 1, timeout=5, what="queued")
        # The waiter may still be between its queued attempt and its wait: give the wake-up
        # listener its subscription first (it is shared and set up once).
        released_at = time.perf_counter()
        holder.release()
        thread.join(timeout=10)
        latencies.append(acquired_at[0] - released_at)
    median = statistics.median(latencies)
    print(f"semaphore handoff median {median * 1000:.2f} ms, max {max(latencies) * 1000:.2f} ms")
    assert median < 0.020


def test_queued_waiters_do_not_poll_and_only_the_admitted_one_wakes(make_server) -> None:
    server = make_server()
    client = server.client(socket_timeout=5)
    backend = Backend(client, namespace="nopoll")
    holder = Semaphore("quiet", 1, client=backend, timeout=10)
    assert holder.acquire()
    admitted: list[int] = []
    threads = []
    for index in range(5):

        def wait_for_slot(index: int = index) -> None:
            semaphore = Semaphore("quiet", 1, client=backend, timeout=10)
            assert semaphore.acquire(timeout=30)
            admitted.append(index)
            semaphore.release()

        threads.append(threading.Thread(target=wait_for_slot))
        threads[-1].start()
        wait_until(queued(backend, "quiet", index + 1), timeout=5, what="queued")
    before = evalsha_calls(client)
    blocked_since = time.monotonic()
    wait_until(lambda: time.monotonic() - blocked_since > 1.0, timeout=5, what="1 s")
    during = evalsha_calls(client) - before
    # Each waiter re-checks at most every 0.5 s when nothing wakes it: <= 3 tries each.
    assert during <= 5 * 3, f"5 waiters ran {during} scripts in 1 s"
    holder.release()
    for thread in threads:
        thread.join(timeout=30)
    assert admitted == [0, 1, 2, 3, 4]
    client.close()


def test_expired_holder_loses_its_slot_and_cannot_get_it_back(backend: Backend) -> None:
    short = Semaphore("expiry", 1, client=backend, timeout=0.3)
    assert short.acquire()
    other = Semaphore("expiry", 1, client=backend, timeout=5)
    started = time.monotonic()
    assert other.acquire(timeout=5)  # woken when the first holder's TTL runs out
    assert time.monotonic() - started < 1.0
    with pytest.raises(LockLost):
        short.refresh()
    with pytest.raises(LockNotOwned):  # the lost hold is forgotten
        short.release()
    assert other.count() == 1 and other.held()
    other.release()


def test_ensure_held_reports_the_ttl_then_the_loss(backend: Backend) -> None:
    semaphore = Semaphore("ensure", 1, client=backend, timeout=0.5)
    assert semaphore.acquire()
    assert 0 < semaphore.ensure_held() <= 0.5
    wait_until(lambda: semaphore.count() == 0, timeout=5, what="expiry")
    with pytest.raises(LockLost):
        semaphore.ensure_held()
    assert not semaphore.held()


def test_refresh_restores_the_full_ttl(backend: Backend, redis_client) -> None:
    semaphore = Semaphore("refresh", 2, client=backend, timeout=2)
    assert semaphore.acquire()
    keys = backend.keys.semaphore("refresh")
    first_expiry = redis_client.zscore(keys.holders, token_of(semaphore))
    wait_until(lambda: semaphore.ensure_held() < 1.8, timeout=5, what="time to pass")
    assert semaphore.refresh() == 2
    assert redis_client.zscore(keys.holders, token_of(semaphore)) > first_expiry
    assert semaphore.ensure_held() > 1.8
    semaphore.release()


#: Ends a semaphore holder's slot now: its expiry set to the server's current millisecond.
END_NOW = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], 'XX', now_ms, ARGV[1])
return now_ms
"""


def test_a_refresh_in_the_millisecond_a_slot_ends_does_not_revive_it(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """A holder counts while its expiry is in the future: a refresh that runs in the very
    millisecond its TTL ends finds no slot (reply 0, nothing written). Its end is set to the
    server's clock and the refresh runs right after that in one MULTI, most tries in the same
    millisecond; a refresh a millisecond later must fail too, so every try must."""
    keys = backend.keys.semaphore("last-ms")
    other = Semaphore("last-ms", 2, client=backend, timeout=10)
    assert other.acquire() and other.refresh() == 10  # both scripts loaded
    for index in range(20):
        token = f"ending-{index}"
        grant = protocol.acquire_call(keys, token, 2, 10_000, "{}", queue=False, lease_ms=0)
        assert isinstance(
            protocol.decode_acquire(backend.client.evalsha(*grant.evalsha_args())), Acquired
        )
        refresh = protocol.refresh_call(keys, token, 10_000, None)
        with redis_client.pipeline(transaction=True) as pipe:
            pipe.eval(END_NOW, 1, keys.holders, token)
            pipe.evalsha(*refresh.evalsha_args())
            ended_at, reply = pipe.execute()
        assert reply == [0], f"try {index}: slot ended at {ended_at} ms, refresh replied {reply}"
        assert redis_client.zscore(keys.holders, token) in (None, ended_at)
    assert other.count() == 1
    other.release()


def test_auto_renew_keeps_a_slot_past_its_ttl(backend: Backend) -> None:
    semaphore = Semaphore("renewed", 1, client=backend, timeout=0.6, auto_renew=True)
    assert semaphore.acquire()
    held_since = time.monotonic()
    intruder = Semaphore("renewed", 1, client=backend, blocking=False)
    while time.monotonic() - held_since < 2.0:  # more than three TTLs
        assert not intruder.acquire()
        assert semaphore.ensure_held() > 0
        time.sleep(0.1)  # the work done while holding
    semaphore.release()
    assert intruder.acquire()
    intruder.release()


def test_a_retried_acquire_with_the_same_token_is_recognised(backend: Backend) -> None:
    keys = backend.keys.semaphore("retry")
    call = protocol.acquire_call(
        keys, "one-token", 2, 5000, "{}", queue=False, lease_ms=1000, channel="unused"
    )
    first = protocol.decode_acquire(backend.client.evalsha(*call.evalsha_args()))
    again = protocol.decode_acquire(backend.client.evalsha(*call.evalsha_args()))
    assert isinstance(first, Acquired) and isinstance(again, Acquired)
    assert not first.retried and again.retried and again.fence == first.fence
    assert Semaphore("retry", 2, client=backend).count() == 1


def test_threads_sharing_one_semaphore_object_never_exceed_the_limit(backend: Backend) -> None:
    semaphore = Semaphore("threads", 2, client=backend, timeout=5)
    inside = 0
    peak = 0
    guard = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        nonlocal inside, peak
        try:
            for _ in range(25):
                with semaphore:
                    with guard:
                        inside += 1
                        peak = max(peak, inside)
                    time.sleep(0.001)  # the work done while holding
                    with guard:
                        inside -= 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert peak == 2
    assert semaphore.count() == 0


def test_holder_ids_name_holds_without_revealing_tokens(backend: Backend) -> None:
    assert Semaphore("ids", 1, client=backend).holder_id is None  # holds nothing
    semaphore = Semaphore("ids", 1, client=backend, timeout=5)
    assert semaphore.acquire()
    token = token_of(semaphore)
    assert semaphore.holder_id == holder_id(token) and len(holder_id(token)) == 16
    [info] = semaphore.holders()
    assert info.holder_id == semaphore.holder_id
    assert token not in repr(info)
    semaphore.release()


# -- asyncio -------------------------------------------------------------------------------
def test_every_sync_method_has_an_async_twin_with_the_same_signature() -> None:
    public = {name for name in dir(Semaphore) if not name.startswith("_")}
    coroutines = {n for n in public if iscoroutinefunction(getattr(Semaphore, n))}
    assert coroutines == {f"a{name}" for name in SYNC_TWINS}
    for name in SYNC_TWINS:
        sync = inspect.signature(getattr(Semaphore, name))
        twin = inspect.signature(getattr(Semaphore, f"a{name}"))
        assert sync.parameters == twin.parameters, name
        assert sync.return_annotation == twin.return_annotation, name


def run_async(redis_server, namespace: str, scenario) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url, socket_timeout=5)
        backend = Backend(client, namespace=namespace)
        try:
            await scenario(backend)
        finally:
            await client.aclose()
            backend.close()

    asyncio.run(main())


def test_tasks_sharing_one_semaphore_hold_separately(redis_server, namespace: str) -> None:
    async def scenario(backend: Backend) -> None:
        semaphore = Semaphore("tasks", 2, client=backend, timeout=5)
        entered = asyncio.Event()
        leave = asyncio.Event()

        async def holder() -> None:
            async with semaphore:
                entered.set()
                await leave.wait()

        task = asyncio.create_task(holder())
        await entered.wait()
        assert await semaphore.acount() == 1
        with pytest.raises(LockNotOwned):  # this task holds nothing: it cannot release
            await semaphore.arelease()
        assert await semaphore.aacquire()
        assert await semaphore.acount() == 2 and await semaphore.aheld()
        assert await semaphore.arefresh() == 5
        assert len(await semaphore.aholders()) == 2
        assert await semaphore.aensure_held() > 4
        await semaphore.arelease()
        leave.set()
        await task
        assert await semaphore.acount() == 0

    run_async(redis_server, namespace, scenario)


def test_cancelled_async_waiter_leaves_the_queue(redis_server, namespace: str) -> None:
    async def scenario(backend: Backend) -> None:
        holder = Semaphore("cancel", 1, client=backend, timeout=10)
        assert await holder.aacquire()
        waiter = asyncio.create_task(Semaphore("cancel", 1, client=backend).aacquire())
        for _ in range(500):
            if waiting(backend, "cancel") == 1:
                break
            await asyncio.sleep(0.01)  # yield to the waiter task
        assert waiting(backend, "cancel") == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        # The clean-up runs in the background, well before the place's 3 s lease would end.
        for _ in range(100):
            if waiting(backend, "cancel") == 0:
                break
            await asyncio.sleep(0.01)
        assert waiting(backend, "cancel") == 0
        await holder.arelease()
        assert get_semaphore("cancel", client=backend) is None

    run_async(redis_server, namespace, scenario)


def test_a_release_admits_a_live_waiter_which_confirms_it_with_one_script(make_server) -> None:
    server = make_server()
    client = server.client(socket_timeout=5)
    backend = Backend(client, namespace="handover")
    holder = Semaphore("baton", 1, client=backend, timeout=10)
    assert holder.acquire()
    holder.release()  # both scripts are loaded now: no NOSCRIPT retry below
    assert holder.acquire()
    waiter = Semaphore("baton", 1, client=backend, timeout=10)
    waiter.recheck_seconds = 60  # type: ignore[misc]  # no re-check during the test
    admitted: list[object] = []
    done = threading.Event()

    def wait_for_it() -> None:
        admitted.extend([waiter.acquire(timeout=10), waiter.holder_id])
        done.wait(10)
        waiter.release()

    thread = threading.Thread(target=wait_for_it)
    before = evalsha_calls(client)
    thread.start()
    wait_until(lambda: evalsha_calls(client) - before >= 2, timeout=5, what="its tries")
    wait_until(queued(backend, "baton", 1), timeout=5, what="queued")
    tries = evalsha_calls(client) - before
    holder.release()
    wait_until(lambda: bool(admitted), timeout=10, what="the waiter to have the slot")
    # The release, which admitted the waiter for the confirmation window and woke it, and
    # the waiter's confirmation, whose reply alone makes it a holder: no re-check, no polling.
    assert evalsha_calls(client) - before == tries + 2
    assert admitted[0] is True
    assert [h.holder_id for h in holder.holders()] == [admitted[1]]
    done.set()
    thread.join(timeout=10)
    client.close()


@pytest.mark.parametrize(("dead", "left"), [(60, 0), (65, 1)])
def test_a_script_drops_up_to_sixty_four_dead_places(
    backend: Backend, redis_client: redis.Redis, dead: int, left: int
) -> None:
    """Waiters whose lease ran out cost bounded work: one script drops up to SEMAPHORE_PRUNE
    (32) of them by lease, and its admission pass up to 32 more on its way through the queue;
    past that it leaves the rest to later scripts (and a newcomer waits for them). 60 dead
    places: a newcomer's try drops them all and takes the free slot; 65: one is left, and the
    next try drops it."""
    keys = backend.keys.semaphore(f"dead-{dead}")
    channel = silent_channel(backend)

    def acquire(token: str, *, queue: bool, lease_ms: int = 0, ttl_ms: int = 10_000) -> object:
        call = protocol.acquire_call(
            keys, token, 1, ttl_ms, "{}", queue=queue, lease_ms=lease_ms, channel=channel
        )
        return protocol.decode_acquire(backend.run_many([call])[0])

    # The hold and every lease end at one server moment, so none runs out while the queue is
    # being filled (a loaded machine once took longer than a fixed 100 ms lease to enqueue 65,
    # and the later asks dropped the early dead places before the newcomer came).
    ends = server_ms(redis_client) + 2_000
    holder_ms = ends - server_ms(redis_client)
    assert isinstance(acquire("holder", queue=False, ttl_ms=holder_ms), Acquired)
    for index in range(dead):
        left_ms = ends - server_ms(redis_client)
        assert left_ms > 0, "filling the queue took longer than the leases; the setup is void"
        assert isinstance(acquire(f"w{index}", queue=True, lease_ms=left_ms), Contended)
    assert redis_client.zcard(keys.queue) == dead
    # (The grant's own clock came a little after ``ends`` was measured from: its expiry.)
    held_until = max(ends, int(redis_client.zscore(keys.holders, "holder") or 0))
    wait_until(
        lambda: server_ms(redis_client) > held_until + 5,
        timeout=5,
        what="the hold's and leases' end",
    )
    reply = acquire("newcomer", queue=False)
    assert redis_client.zcard(keys.queue) == left
    if left:
        assert isinstance(reply, Contended)  # a dead place is still ahead of it
        reply = acquire("newcomer", queue=False)
        assert redis_client.zcard(keys.queue) == 0
    assert isinstance(reply, Acquired)


WRITES = ("pexpire", "zadd", "zrem", "hset", "hdel", "del", "publish")


def write_calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in WRITES}


def test_a_release_with_nothing_to_release_runs_no_write_command(make_server) -> None:
    """A release resent after it took effect (3) and one of a token that never held (0), with
    nobody waiting, write nothing: not even the keys' expiries set again."""
    server = make_server()
    with server.client(socket_timeout=5) as client:
        backend = Backend(client, namespace="noop")
        keys = backend.keys.semaphore("idle")
        holder = Semaphore("idle", 2, client=backend, timeout=30)
        assert holder.acquire()
        token = holder._current_hold().token  # type: ignore[union-attr]
        keeper = Semaphore("idle", 2, client=backend, timeout=30)
        assert keeper.acquire()  # (so that the keys stay)
        holder.release()
        before = write_calls(client)
        replies = backend.run_many(
            [protocol.release_call(keys, token), protocol.release_call(keys, "n" * 32)]
        )
        assert [int(reply) for reply in replies] == [3, 0]
        assert write_calls(client) == before
        keeper.release()
        backend.close()


@pytest.mark.parametrize("waiting", [False, True])
def test_a_refused_acquire_runs_no_write_command(make_server, waiting: bool) -> None:
    """An acquire refused for its limit ({-1, stored limit}) writes nothing, and a try refused
    while the slots are full writes only its count in the contention figures: not even an
    expiry of the semaphore's keys set again to the value it had (each write goes to
    replicas and the append-only file). Counted from the server's command statistics, which
    count the commands scripts call."""
    server = make_server()
    with server.client(socket_timeout=5) as client:
        backend = Backend(client, namespace="refused")
        holder = Semaphore("full", 1, client=backend, timeout=30)
        assert holder.acquire()
        if waiting:
            keys = backend.keys.semaphore("full")
            call = protocol.acquire_call(
                keys,
                "waiter",
                1,
                30_000,
                "{}",
                queue=True,
                lease_ms=30_000,
                channel=silent_channel(backend),
            )
            assert isinstance(protocol.decode_acquire(backend.run_many([call])[0]), Contended)
        keys = backend.keys.semaphore("full")
        dumps = [client.dump(key) for key in keys.state]
        before = write_calls(client)
        with pytest.raises(SemaphoreLimitMismatch):
            Semaphore("full", 2, client=backend, timeout=30).acquire(blocking=False)
        assert write_calls(client) == before
        assert not Semaphore("full", 1, client=backend, timeout=30).acquire(blocking=False)
        # The refused try is contention: counted in the bucket's figures (lib/hot), and only
        # there: the semaphore's own keys are untouched.
        counted = {name: calls - before[name] for name, calls in write_calls(client).items()}
        assert counted == {name: int(name in ("hset", "pexpire")) for name in WRITES}
        assert [client.dump(key) for key in keys.state] == dumps
        holder.release()
        backend.close()

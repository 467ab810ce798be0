"""A hand-over or an admission never outlives what Redis keeps, and a woken waiter keeps its turn.

Regression tests for three defects found from outside: a semaphore admission left the keys'
expiries behind (holders over the limit once earlier holders crashed), and a waiter that takes
a lock itself (``wait_for_replicas``) was woken, dropped from the queue and queued again at the
back, so others were served again and again while it waited.
"""

from __future__ import annotations

import threading
import time

import redis

from django_redis_locks import Lock, Semaphore
from django_redis_locks.core import Backend, SemaphoreLimitMismatch
from django_redis_locks.core.protocol import lock_calls, semaphore_calls
from django_redis_locks.core.protocol.holder import new_token
from django_redis_locks.core.protocol.replies import Acquired, Contended
from tests.harness.acl import silent_channel
from tests.harness.servers import wait_until
from tests.helpers import server_ms


def semaphore_key_ttls(client: redis.Redis, backend: Backend, name: str) -> dict[str, int]:
    """PTTL of each semaphore key that exists (-1: no expiry)."""
    keys = backend.keys.semaphore(name)
    found = {}
    for key in (keys.holders, keys.info, keys.queue, keys.leases):
        if client.exists(key):
            found[key] = int(client.pttl(key))
    return found


def test_a_waiter_admitted_by_its_own_recheck_keeps_every_key_alive(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """Limit 2: X (4 s) and A (1 s) never release; W (30 s) is admitted when A runs out. Once X
    runs out too, only one newcomer may join W, and every key lives as long as W's slot."""
    x = Semaphore("sem-crash", 2, client=backend, timeout=4)
    a = Semaphore("sem-crash", 2, client=backend, timeout=1)
    holders = [x, a]
    for semaphore in holders:
        done = threading.Event()

        def take(semaphore: Semaphore = semaphore, done: threading.Event = done) -> None:
            assert semaphore.acquire(blocking=False)
            done.set()

        threading.Thread(target=take).start()  # held by a thread that never releases
        assert done.wait(5)
    w = Semaphore("sem-crash", 2, client=backend, timeout=30)
    started = time.monotonic()
    assert w.acquire(timeout=5)
    assert time.monotonic() - started > 0.5  # admitted when A ran out, not at once
    for key, ttl in semaphore_key_ttls(redis_client, backend, "sem-crash").items():
        assert ttl > 25_000, f"{key} keeps {ttl} ms while W holds for 30 s"
    wait_until(lambda: w.count() == 1, timeout=6, what="X ran out")
    newcomers = [Semaphore("sem-crash", 2, client=backend, timeout=30) for _ in range(2)]
    admitted = [n.acquire(blocking=False) for n in newcomers]
    assert admitted.count(True) == 1
    assert w.held()
    assert w.count() == 2


def test_limit_one_admission_keeps_the_holders_key_and_the_limit(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """Limit 1: X (1 s) never releases; W (30 s) is admitted when X runs out. No key is left
    without an expiry, and the stored limit stays while W holds."""
    x = Semaphore("sem-crash-1", 1, client=backend, timeout=1)
    done = threading.Event()

    def take() -> None:
        assert x.acquire(blocking=False)
        done.set()

    threading.Thread(target=take).start()
    assert done.wait(5)
    w = Semaphore("sem-crash-1", 1, client=backend, timeout=30)
    assert w.acquire(timeout=5)
    ttls = semaphore_key_ttls(redis_client, backend, "sem-crash-1")
    assert ttls, "no key left while W holds"
    for key, ttl in ttls.items():
        assert ttl > 25_000, f"{key} keeps {ttl} ms while W holds for 30 s"
    other = Semaphore("sem-crash-1", 5, client=backend, timeout=30)
    try:
        taken = other.acquire(blocking=False)
    except SemaphoreLimitMismatch:
        taken = False
    assert not taken
    assert Semaphore("sem-crash-1", 1, client=backend).acquire(blocking=False) is False
    assert w.held()


def test_a_waiter_that_takes_the_lock_itself_is_not_starved(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """W (wait_for_replicas=0: it takes the lock with its own script and WAIT) queues first;
    two threads keep acquiring and releasing. W gets the lock long before its timeout."""
    holder = Lock("starve", client=backend, timeout=10)
    assert holder.acquire()
    stop = threading.Event()
    served = [0, 0]
    errors: list[BaseException] = []

    def churn(index: int) -> None:
        lock = Lock("starve", client=backend, timeout=10, slice_seconds=0)
        try:
            while not stop.is_set():
                if lock.acquire(timeout=10):
                    served[index] += 1
                    time.sleep(0.002)
                    lock.release()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    w = Lock("starve", client=backend, timeout=10, wait_for_replicas=0)
    result: list[bool] = []

    def wait_for_it() -> None:
        result.append(w.acquire(timeout=4))
        if result[-1]:
            w.release()

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    wait_until(
        lambda: redis_client.zcard(backend.keys.lock("starve").queue) == 1,
        timeout=5,
        what="W queued",
    )
    threads = [threading.Thread(target=churn, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    wait_until(
        lambda: redis_client.zcard(backend.keys.lock("starve").queue) == 3,
        timeout=5,
        what="the two churners queued behind W",
    )
    holder.release()
    waiter.join(10)
    stop.set()
    for thread in threads:
        thread.join(15)
    assert not errors
    assert result == [True], f"W starved while the others were served {served} times"


def test_a_waiter_that_takes_a_crashed_holders_lock_with_its_own_recheck_leaves_the_queue(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """H (0.3 s) never releases; W queues, and its next try after H ran out takes the lock as
    the queue's head. It holds, so it waits no more: its place is gone (a place left behind
    would stand before every later waiter, and a release would hand the lock to W again)."""
    keys = backend.keys.lock("crashed-holder")
    h, w = new_token(), new_token()
    granted = lock_calls.decode_acquire(
        backend.run_many([lock_calls.acquire_call(keys, h, 300, "{}")])[0]
    )
    assert isinstance(granted, Acquired)

    def ask() -> object:
        call = lock_calls.acquire_call(
            keys, w, 30_000, "{}", queue=True, lease_ms=10_000, channel=silent_channel(backend)
        )
        return lock_calls.decode_acquire(backend.run_many([call])[0])

    assert isinstance(ask(), Contended)
    assert redis_client.zscore(keys.queue, w) is not None
    wait_until(
        lambda: server_ms(redis_client) > granted.server_now_ms + 300, timeout=5, what="H ran out"
    )
    assert isinstance(ask(), Acquired)
    assert redis_client.zscore(keys.queue, w) is None
    assert redis_client.zcard(keys.queue) == 0


def test_a_waiter_leaving_the_queue_admits_the_next_one_to_a_free_slot(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """Limit 1: X (0.3 s) never releases; W1 and W2 queue. Once X ran out, W1 gives up: the
    script that takes W1's place away admits W2 at once, not at W2's next re-check."""
    keys = backend.keys.semaphore("leaving-waiter")
    x, w1, w2 = new_token(), new_token(), new_token()
    granted = semaphore_calls.decode_acquire(
        backend.run_many(
            [semaphore_calls.acquire_call(keys, x, 1, 300, "{}", queue=False, lease_ms=0)]
        )[0]
    )
    assert isinstance(granted, Acquired)
    for token in (w1, w2):
        call = semaphore_calls.acquire_call(
            keys,
            token,
            1,
            30_000,
            "{}",
            queue=True,
            lease_ms=10_000,
            channel=silent_channel(backend),
        )
        assert isinstance(semaphore_calls.decode_acquire(backend.run_many([call])[0]), Contended)
    wait_until(
        lambda: server_ms(redis_client) > granted.server_now_ms + 300, timeout=5, what="X ran out"
    )
    assert redis_client.zscore(keys.holders, w2) is None
    backend.run_many([semaphore_calls.release_call(keys, w1)])
    admitted = redis_client.zscore(keys.holders, w2)
    assert admitted is not None and admitted > server_ms(redis_client)

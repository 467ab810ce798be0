"""Auto-renewal: one batched renewer per process, lost holds reported, fork-safe."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import warnings

import pytest

from django_redis_locks import Lock, LockLost, LockNotOwned
from django_redis_locks.core import Backend
from django_redis_locks.core.runtime.renewal import renewer
from tests.harness.servers import wait_until


def test_auto_renew_keeps_a_1s_lock_for_5s_of_work(backend: Backend, redis_client) -> None:
    lock = Lock("long-job", client=backend, timeout=1, auto_renew=True)
    other = Lock("long-job", client=backend, timeout=1, blocking=False)
    lock.acquire()
    key = lock._keys_for(backend).lock
    started = time.monotonic()
    while time.monotonic() - started < 5.0:  # "work" for 5 s, checking all along
        assert not other.acquire(), "the lock was free while its holder was working"
        assert redis_client.pttl(key) > 0
        time.sleep(0.1)  # a slice of the work
    assert lock.ensure_held() > 0.3
    lock.release()
    assert not lock.locked()


def test_an_extend_that_shortens_an_auto_renewed_hold_brings_its_renewal_forward(
    backend: Backend,
) -> None:
    """Renewals top a hold up to the lock's TTL and never shorten it, so an extend(replace=True)
    that shortens an auto-renewed hold lasts until the next renewal. That renewal comes within a
    third of the shorter TTL: it used to stay due a third of the lock's TTL after the acquire
    (1 s here), after the shortened hold had ended (0.6 s), and the hold was lost."""
    lost: list[str] = []
    lock = Lock(
        "shortened",
        client=backend,
        timeout=3,
        auto_renew=True,
        on_lost=lambda lock, reason: lost.append(reason),
    )
    other = Lock("shortened", client=backend, timeout=3, blocking=False)
    lock.acquire()
    try:
        assert lock.extend(0.6, replace=True) <= 0.6
        # Renewed back up to the lock's TTL (3 s) well before the shortened hold's end.
        wait_until(lambda: lock.ensure_held() > 1.0, timeout=0.5, what="the renewal")
        started = time.monotonic()
        while time.monotonic() - started < 1.5:  # past the old renewal's time, and beyond
            assert not other.acquire(), "the shortened hold ran out while auto-renewed"
            time.sleep(0.1)
        assert lock.ensure_held() > 1.0
        assert lost == []
    finally:
        lock.release()


def test_renewals_are_batched_into_one_round_trip(backend: Backend) -> None:
    locks = [Lock(f"batch-{i}", client=backend, timeout=0.6, auto_renew=True) for i in range(20)]
    for lock in locks:
        lock.acquire()
    rounds_before = renewer().rounds_on(backend)  # (other tests' lanes keep working)
    time.sleep(1.0)  # long enough for several renewal beats of 0.2 s
    rounds = renewer().rounds_on(backend) - rounds_before
    for lock in locks:
        assert lock.ensure_held() > 0
        lock.release()
    # 20 holds renewed every 0.2 s for 1 s: a renewer per hold would need ~100 rounds.
    assert 2 <= rounds <= 15


def test_deleted_key_is_reported_within_one_renewal_interval(
    backend: Backend, redis_client
) -> None:
    lost: list[str] = []
    lock = Lock(
        "vanishing",
        client=backend,
        timeout=1.5,
        auto_renew=True,
        on_lost=lambda lock, reason: lost.append(reason),
    )
    lock.acquire()
    redis_client.delete(lock._keys_for(backend).lock)
    deleted_at = time.monotonic()
    hold = lock._current_hold()
    assert hold is not None
    assert hold.lost_event.wait(timeout=1.5 / 3 + 0.3), "the renewer did not notice"
    noticed = time.monotonic() - deleted_at
    assert noticed <= 1.5 / 3 + 0.3
    assert lost and "expired" in lost[0]
    with pytest.raises(LockLost):
        lock.ensure_held()


def test_taken_over_hold_is_reported(backend: Backend, redis_client) -> None:
    lock = Lock("stolen", client=backend, timeout=0.6, auto_renew=True)
    lock.acquire()
    key = lock._keys_for(backend).lock
    redis_client.hset(key, "token", "someone-else")
    hold = lock._current_hold()
    assert hold is not None
    assert hold.lost_event.wait(timeout=1.0)
    with pytest.raises(LockLost, match="another holder"):
        lock.ensure_held()


def test_release_stops_renewing(backend: Backend) -> None:
    lock = Lock("stop", client=backend, timeout=0.6, auto_renew=True)
    lock.acquire()
    hold = lock._current_hold()
    assert hold is not None and hold in renewer()
    lock.release()
    assert hold not in renewer()


def test_hold_of_a_finished_thread_is_not_renewed(backend: Backend) -> None:
    lock = Lock("orphan", client=backend, timeout=0.6, auto_renew=True)
    thread = threading.Thread(target=lock.acquire)
    thread.start()
    thread.join()
    assert lock.locked()
    # Its owner is gone, so nobody could ever release it: it must expire, not live for ever.
    wait_until(lambda: not lock.locked(), timeout=3, what="orphaned hold to expire")


def test_async_holds_are_renewed_too(redis_server, namespace: str) -> None:
    import redis

    async def main() -> float:
        client = redis.asyncio.Redis.from_url(redis_server.url, socket_timeout=5)
        lock = Lock(
            "async-renew", client=Backend(client, namespace=namespace), timeout=1, auto_renew=True
        )
        async with lock:
            # Two TTLs of work. The first renewal, on the sync twin, also opens the twin's
            # first connection: a 1 s TTL leaves it 0.67 s for that on a loaded machine.
            await asyncio.sleep(2.0)
            left = await lock.aensure_held()
        await client.aclose()
        lock.backend.client.close()
        return left

    assert asyncio.run(main()) > 0


def test_forked_child_cannot_release_or_renew_the_parent_hold(backend: Backend) -> None:
    lock = Lock("forked", client=backend, timeout=1, auto_renew=True)
    lock.acquire()
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads: on purpose
        pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            try:
                lock.release()
                code = 1
            except LockNotOwned:
                pass
            if lock.owned() or lock.fence is not None or renewer().running:
                code = 2
        except BaseException:
            code = 3
        os.write(write_end, bytes([code]))
        os._exit(0)
    os.close(write_end)
    result = os.read(read_end, 1)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert result == b"\x00", f"child check failed with code {result!r}"
    time.sleep(1.2)  # longer than the TTL: the parent's renewer must still be at work
    assert lock.ensure_held() > 0
    lock.release()

"""Lock semantics on a real server: acquire, release, extend, expiry, ownership, `with`."""

from __future__ import annotations

import threading
import time

import pytest

from django_redis_locks import (
    Lock,
    LockAlreadyHeld,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    Semaphore,
)
from django_redis_locks.core import Backend
from tests.harness.servers import wait_until
from tests.helpers import held_ttl_ms, is_held, stored_metadata


def lock_key(lock: Lock) -> str:
    return lock._keys_for(lock.backend).lock


def snapshot(client, key: str) -> tuple[dict[bytes, bytes], int]:
    return client.hgetall(key), client.pttl(key)


def test_acquire_sets_token_ttl_fence_and_metadata(backend: Backend, redis_client) -> None:
    lock = Lock("orders:1", client=backend, timeout=5, metadata={"label": "tests.charge"})
    assert lock.acquire() is True
    state = redis_client.hgetall(lock_key(lock))
    assert len(state[b"token"]) >= 22  # 160 random bits, URL-safe
    assert int(state[b"fence"]) == lock.fence
    assert 4000 < (held_ttl_ms(redis_client, lock_key(lock)) or 0) <= 5000
    # The metadata JSON in pieces of at most 64 bytes (m1, m2, ...; mn: how many), so that the
    # hash keeps Redis's compact encoding.
    pieces = int(state[b"mn"])
    assert pieces >= 2 and all(len(state[f"m{i}".encode()]) <= 64 for i in range(1, pieces + 1))
    meta = (stored_metadata(redis_client, lock_key(lock)) or b"").decode()
    assert '"label":"tests.charge"' in meta and '"pid":' in meta and '"host":' in meta
    assert redis_client.object("encoding", lock_key(lock)) == b"listpack"
    assert int(state[b"expires"]) - int(state[b"acquired"]) == 5000
    assert lock.locked() and lock.owned()
    lock.release()
    assert not is_held(redis_client, lock_key(lock))
    assert not lock.locked() and lock.fence is None


def test_float_timeout_is_honoured(backend: Backend, redis_client) -> None:
    lock = Lock("half-second", client=backend, timeout=0.5)
    assert lock.acquire()
    assert 0 < (held_ttl_ms(redis_client, lock_key(lock)) or 0) <= 500
    lock.release()


def test_contention_without_blocking(backend: Backend) -> None:
    first = Lock("busy", client=backend, timeout=5)
    second = Lock("busy", client=backend, timeout=5, blocking=False)
    assert first.acquire()
    assert second.acquire() is False
    assert second.acquire(blocking=False) is False
    started = time.monotonic()
    assert second.acquire(blocking=True, timeout=0.2) is False
    assert 0.2 <= time.monotonic() - started < 1.5
    first.release()
    assert second.acquire()
    second.release()


def test_non_owner_release_and_extend_leave_the_key_untouched(
    backend: Backend, redis_client
) -> None:
    holder = Lock("guarded", client=backend, timeout=10)
    intruder = Lock("guarded", client=backend, timeout=10)
    holder.acquire()
    before = snapshot(redis_client, lock_key(holder))
    with pytest.raises(LockNotOwned):
        intruder.release()
    with pytest.raises(LockNotOwned):
        intruder.extend(100)
    after = snapshot(redis_client, lock_key(holder))
    assert after[0] == before[0]
    assert after[1] <= before[1]  # not extended
    holder.release()


def test_stale_token_is_refused_by_the_scripts(backend: Backend, redis_client) -> None:
    """A hold that expired and was retaken: the old token cannot release or extend."""
    old = Lock("retaken", client=backend, timeout=0.1)
    assert old.acquire()
    new = Lock("retaken", client=backend, timeout=10)
    wait_until(lambda: new.acquire(blocking=False), timeout=5, what="expiry of the first hold")
    before = snapshot(redis_client, lock_key(new))
    with pytest.raises(LockLost, match="another holder"):
        old.extend(5)
    with pytest.raises(LockNotOwned):  # the lost hold is forgotten after the error
        old.release()
    after = snapshot(redis_client, lock_key(new))
    assert after[0] == before[0] and after[1] <= before[1]
    assert new.owned()
    new.release()


def test_a_release_after_the_name_was_retaken_says_another_holder_took_it(
    backend: Backend, redis_client
) -> None:
    """The old holder's release finds another token holding: it says so (not "force-released",
    not merely "expired"), and leaves the new hold untouched."""
    old = Lock("retaken-release", client=backend, timeout=0.1)
    assert old.acquire()
    new = Lock("retaken-release", client=backend, timeout=10)
    wait_until(lambda: new.acquire(blocking=False), timeout=5, what="expiry of the first hold")
    before = snapshot(redis_client, lock_key(new))
    with pytest.raises(LockLost, match="expired and another holder took it"):
        old.release()
    assert snapshot(redis_client, lock_key(new))[0] == before[0] and new.owned()
    new.release()


def test_expiry_then_release_raises_lock_lost(backend: Backend) -> None:
    lock = Lock("short", client=backend, timeout=0.05)
    lock.acquire()
    wait_until(lambda: not lock.locked(), timeout=5, what="lock expiry")
    with pytest.raises(LockLost, match="expired"):
        lock.release()


def test_extend_adds_or_replaces(backend: Backend, redis_client) -> None:
    lock = Lock("extend", client=backend, timeout=2)
    lock.acquire()
    new_ttl = lock.extend(10)
    assert 11.5 < new_ttl <= 12.0
    assert 11_500 < (held_ttl_ms(redis_client, lock_key(lock)) or 0) <= 12_000
    assert lock.extend(3, replace=True) == 3.0
    assert 2_500 < (held_ttl_ms(redis_client, lock_key(lock)) or 0) <= 3_000
    assert lock.extend(0.25, replace=True) == 0.25
    assert (held_ttl_ms(redis_client, lock_key(lock)) or 0) <= 250
    lock.release()


def test_an_extend_keeps_the_key_alive_as_long_as_the_hold(backend: Backend, redis_client) -> None:
    """The hash outlives the hold an extend gives it (and the retention after it), also past
    the expiry the acquire had set: a hash that expired first would free a held lock."""
    lock = Lock("extend-far", client=backend, timeout=1)
    lock.acquire()
    assert lock.extend(3600) > 3600
    hold_ms = held_ttl_ms(redis_client, lock_key(lock)) or 0
    assert hold_ms > 3_600_000
    assert redis_client.pttl(lock_key(lock)) >= hold_ms
    lock.release()


def test_ensure_held(backend: Backend, redis_client) -> None:
    lock = Lock("ensure", client=backend, timeout=5)
    with pytest.raises(LockNotOwned):
        lock.ensure_held()
    lock.acquire()
    assert 4.0 < lock.ensure_held() <= 5.0
    redis_client.delete(lock_key(lock))
    with pytest.raises(LockLost):
        lock.ensure_held()
    with pytest.raises(LockNotOwned):
        lock.release()


def test_not_reentrant(backend: Backend) -> None:
    lock = Lock("once", client=backend, timeout=5)
    lock.acquire()
    with pytest.raises(LockAlreadyHeld):
        lock.acquire()
    lock.release()


def test_context_manager(backend: Backend) -> None:
    lock = Lock("ctx", client=backend, timeout=5)
    with lock as held:
        assert held is lock
        assert lock.owned()
        fence = lock.fence
        assert fence is not None
    assert not lock.locked()
    other = Lock("ctx", client=backend, timeout=5, blocking=False)
    with lock:
        with pytest.raises(LockNotAcquired) as info, other:
            pytest.fail("entered a held lock")
        # Estimated from the one earlier hold (a moment long), at most the holder's TTL.
        assert info.value.retry_after is not None
        assert 0.0 < info.value.retry_after <= 5.0


def test_context_manager_raises_lock_lost_when_the_hold_was_lost(
    backend: Backend, redis_client
) -> None:
    lock = Lock("ctx-lost", client=backend, timeout=5)
    with pytest.raises(LockLost), lock:
        redis_client.delete(lock_key(lock))


def test_context_manager_keeps_the_body_exception(backend: Backend, redis_client) -> None:
    lock = Lock("ctx-error", client=backend, timeout=5)
    with pytest.raises(KeyError) as info, lock:
        redis_client.delete(lock_key(lock))
        raise KeyError("boom")
    assert any("ctx-error" in note for note in info.value.__notes__)


def test_threads_sharing_one_lock_object_hold_separately(backend: Backend) -> None:
    lock = Lock("shared-object", client=backend, timeout=5, blocking=False)
    assert lock.acquire()
    seen: list[object] = []

    def other_thread() -> None:
        seen.append(lock.acquire())  # contended: the main thread holds it
        try:
            lock.release()
        except LockNotOwned as exc:
            seen.append(exc)
        seen.append(lock.owned())

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert seen[0] is False
    assert isinstance(seen[1], LockNotOwned)
    assert seen[2] is False
    assert lock.owned()
    lock.release()


def test_release_is_recognised_when_repeated(backend: Backend) -> None:
    """A release whose reply was lost and is sent again (same token) still succeeds."""
    from django_redis_locks.core.protocol import lock_calls as protocol
    from django_redis_locks.core.protocol.replies import RELEASED, RELEASED_BEFORE
    from django_redis_locks.core.protocol.scripting import run

    lock = Lock("again", client=backend, timeout=5)
    lock.acquire()
    hold = lock._current_hold()
    assert hold is not None
    call = protocol.release_call(hold.keys, hold.token)
    assert run(backend.client, call) == RELEASED
    assert run(backend.client, call) == RELEASED_BEFORE  # the retry: recognised
    lock.release()  # and the library's own call after it


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_the_estimate_follows_the_average_hold_not_its_sum(backend: Backend, kind: str) -> None:
    """Eight holds of about 50 ms each: the moving average stays about 50 ms (each release
    weighs a quarter), so a caller refused as the next hold starts is told about 0.05 s, not
    a figure that grows with every hold."""

    def make() -> Lock | Semaphore:
        if kind == "lock":
            return Lock("averaged", client=backend, timeout=30, blocking=False)
        return Semaphore("averaged", 1, client=backend, timeout=30, blocking=False)

    holder, other = make(), make()
    for _ in range(8):
        assert holder.acquire(blocking=False)
        time.sleep(0.05)  # the hold's work (time passing is the scenario)
        holder.release()
    with holder, pytest.raises(LockNotAcquired) as info, other:
        pass
    retry_after = info.value.retry_after
    assert retry_after is not None and 0.04 <= retry_after < 0.1, retry_after

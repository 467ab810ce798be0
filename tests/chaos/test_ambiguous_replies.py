"""Scenario 6: ambiguous calls. The server applied the acquire (or release), the client timed
out before the reply came: the library undoes the unknown grant in the background as soon as
Redis answers again, a retried release is recognised, and no phantom hold is left.

The client talks to a real server through :class:`~tests.harness.proxy.ReplyProxy`, which
forwards every command and drops (or delays past the socket timeout) the replies while a call
is made. The scripts are loaded through the proxy first, so the withheld reply is the one of
the operation's own ``EVALSHA``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from django_redis_locks.core import Lock, LockBackendError, Semaphore
from django_redis_locks.core.protocol.holder import holder_id
from django_redis_locks.inspection import get_lock, get_semaphore
from tests.harness.proxy import Mode
from tests.harness.servers import wait_until
from tests.helpers import Proxied, is_held, only_recent_releases, proxied_backend

pytestmark = pytest.mark.chaos

SOCKET_TIMEOUT = 0.5
BOUND = SOCKET_TIMEOUT + 1.0  # one socket timeout, plus slack for a loaded 2-core machine
DELAY = SOCKET_TIMEOUT * 3  # a delayed reply arrives well after the client gave up


@pytest.fixture
def proxied(make_server: Any) -> Iterator[Proxied]:
    with proxied_backend(
        make_server(), namespace="ambiguous", socket_timeout=SOCKET_TIMEOUT, decode_direct=True
    ) as proxied:
        yield proxied


def withheld(proxied: Proxied, mode: Mode, call: Callable[[], object]) -> float:
    """Run ``call`` with its reply withheld; it must fail with LockBackendError. Its duration."""
    started = time.monotonic()
    with proxied.proxy.withholding(mode, DELAY), pytest.raises(LockBackendError) as info:
        call()
    elapsed = time.monotonic() - started
    assert isinstance(info.value.__cause__, redis.TimeoutError)
    return elapsed


def nothing_left(proxied: Proxied, keys: tuple[str, ...]) -> bool:
    """None of the primitive's queue, waiter or semaphore keys exists (but for a released
    semaphore's record of its recent releases)."""
    return not any(
        proxied.direct.exists(key) and not only_recent_releases(proxied.direct, key) for key in keys
    )


@pytest.mark.parametrize("mode", ["drop", "delay"])
@pytest.mark.parametrize("blocking", [False, True], ids=["try", "blocking"])
def test_an_acquire_whose_reply_was_lost_is_undone_and_a_retry_gets_the_lock_anew(
    proxied: Proxied, figures: dict[str, Any], mode: Mode, blocking: bool
) -> None:
    lock = Lock("ambiguous", client=proxied.backend, timeout=30)
    keys = lock._keys_for(proxied.backend)
    failed_after = withheld(proxied, mode, lambda: lock.acquire(blocking=blocking))
    returned_at = time.monotonic()
    # The server did apply it, and nobody would ever release it: the library does.
    stored_fence = int(proxied.direct.hget(keys.lock, "fence") or 0)
    assert lock.holder_id is None  # not held as far as the object knows
    wait_until(
        lambda: not is_held(proxied.direct, keys.lock), timeout=BOUND, what="the grant undone"
    )
    undone_after = time.monotonic() - returned_at
    assert lock.acquire(blocking=blocking) is True  # the retry: a new grant
    figures.update(
        failed_after_s=round(failed_after, 3),
        undone_after_s=round(undone_after, 3),
        fence_in_redis=stored_fence,
        fence_after_retry=lock.fence,
    )
    assert lock.fence is not None and lock.fence > stored_fence
    assert failed_after < BOUND
    lock.release()
    assert not is_held(proxied.direct, keys.lock)
    assert get_lock("ambiguous", client=proxied.backend) is None
    assert nothing_left(proxied, (keys.queue, keys.waiters, keys.leases))


@pytest.mark.parametrize("mode", ["drop", "delay"])
def test_a_release_whose_reply_was_lost_succeeds_when_retried(
    proxied: Proxied, figures: dict[str, Any], mode: Mode
) -> None:
    lock = Lock("ambiguous-release", client=proxied.backend, timeout=30)
    keys = lock._keys_for(proxied.backend)
    assert lock.acquire(blocking=False)
    fence = lock.fence
    failed_after = withheld(proxied, mode, lock.release)
    applied = not is_held(proxied.direct, keys.lock)
    kept = lock.fence == fence  # the object keeps the hold so that the release can be retried
    lock.release()  # the retry: recognised as the release that already happened
    figures.update(failed_after_s=round(failed_after, 3), applied=applied, hold_kept=kept)
    assert applied and kept
    assert lock.fence is None
    assert failed_after < BOUND
    assert not is_held(proxied.direct, keys.lock)
    assert get_lock("ambiguous-release", client=proxied.backend) is None
    assert nothing_left(proxied, (keys.queue, keys.waiters))
    assert lock.acquire(blocking=False)  # and the lock is free for the next holder
    lock.release()


@pytest.mark.parametrize("mode", ["drop", "delay"])
def test_a_semaphore_acquire_and_release_whose_replies_were_lost_leave_no_phantom_slot(
    proxied: Proxied, figures: dict[str, Any], mode: Mode
) -> None:
    semaphore = Semaphore("ambiguous-sem", 2, client=proxied.backend, timeout=30)
    keys = semaphore._keys_for(proxied.backend)
    acquire_failed_after = withheld(proxied, mode, lambda: semaphore.acquire(blocking=False))
    # Applied: held, or already undone (a reply that was only delayed lets the library undo
    # the grant at once), which leaves a record of the release in the info hash.
    applied = proxied.direct.zcard(keys.holders) == 1 or bool(
        proxied.direct.hexists(keys.info, "gone")
    )
    # The unknown grant is undone in the background as soon as Redis answers again.
    wait_until(lambda: semaphore.count() == 0, timeout=BOUND, what="the grant undone")
    assert semaphore.acquire(blocking=False)  # the retry: a new grant
    token = str(proxied.direct.zrange(keys.holders, 0, 0)[0])
    slots_after_retry = semaphore.count()
    holders = [h.holder_id for h in semaphore.holders()]
    release_failed_after = withheld(proxied, mode, semaphore.release)
    released = semaphore.count() == 0
    semaphore.release()  # the retry
    figures.update(
        acquire_failed_after_s=round(acquire_failed_after, 3),
        release_failed_after_s=round(release_failed_after, 3),
        slots_after_retried_acquire=slots_after_retry,
    )
    assert applied
    assert slots_after_retry == 1  # one slot: the retry did not take a second one
    assert holders == [holder_id(token)]
    assert released
    assert acquire_failed_after < BOUND and release_failed_after < BOUND
    assert get_semaphore("ambiguous-sem", client=proxied.backend) is None
    assert nothing_left(proxied, keys.state)


def test_async_acquire_and_release_whose_replies_were_lost_are_undone_or_recognised(
    proxied: Proxied, figures: dict[str, Any]
) -> None:
    async def scenario() -> dict[str, Any]:
        lock = Lock("ambiguous-async", client=proxied.backend, timeout=30)
        keys = lock._keys_for(proxied.backend)
        await lock.aacquire()  # connects the loop's asyncio client through the proxy
        await lock.arelease()
        outcome: dict[str, Any] = {}
        with proxied.proxy.withholding("drop"), pytest.raises(LockBackendError):
            await lock.aacquire()
        outcome["stored_fence"] = int(proxied.direct.hget(keys.lock, "fence") or 0)
        started = time.monotonic()
        while is_held(proxied.direct, keys.lock) and time.monotonic() - started < BOUND:
            await asyncio.sleep(0.01)  # the library undoes the unknown grant meanwhile
        outcome["undone_after_s"] = round(time.monotonic() - started, 3)
        outcome["retried"] = await lock.aacquire()
        outcome["fence"] = lock.fence
        with proxied.proxy.withholding("drop"), pytest.raises(LockBackendError):
            await lock.arelease()
        outcome["applied"] = not is_held(proxied.direct, keys.lock)
        await lock.arelease()
        outcome["left"] = not nothing_left(proxied, (keys.queue, keys.waiters))
        outcome["held"] = is_held(proxied.direct, keys.lock)
        await proxied.backend.aclose()
        return outcome

    outcome = asyncio.run(scenario())
    figures.update(outcome)
    assert outcome["retried"] is True
    assert outcome["undone_after_s"] < BOUND
    assert outcome["fence"] > outcome["stored_fence"]  # a new grant
    assert outcome["applied"]
    assert not outcome["held"] and not outcome["left"]

"""What the scripts do in the very millisecond a deadline or a hold ends.

The scripts read the server's clock in whole milliseconds. A request is valid up to and
including its deadline's millisecond; a hold is live while its expiry is in the future, so in
the millisecond it ends it is no hold. Each test makes that millisecond happen on a real
server: a script call that reads ``TIME`` and the script under test run back to back (in one
MULTI, or a request sent right after reading the clock), and the tries that did land in the
same millisecond are the ones checked.
"""

from __future__ import annotations

import redis

from django_redis_locks.core import Backend, Lock, Semaphore
from django_redis_locks.core.protocol import lock_calls, semaphore_calls
from django_redis_locks.core.protocol.replies import Acquired, TooLate
from tests.helpers import server_ms

TRIES = 200
#: Tries that must land in their deadline's millisecond (most do: a loopback round trip is
#: well under a millisecond).
AT_LEAST = 5


def test_a_lock_acquire_in_its_deadlines_millisecond_is_granted(
    backend: Backend, redis_client: redis.Redis
) -> None:
    keys = backend.keys.lock("deadline-ms")
    Lock("warm-up", client=backend).acquire(blocking=False)  # the scripts are loaded
    at_deadline = 0
    for index in range(TRIES):
        deadline = server_ms(redis_client)
        call = lock_calls.acquire_call(keys, f"t{index}", 10_000, "{}", deadline_ms=deadline)
        reply = lock_calls.decode_acquire(backend.run_many([call])[0])
        assert isinstance(reply, Acquired | TooLate), f"try {index}: {reply}"
        now = reply.server_now_ms
        if now == deadline:
            at_deadline += 1
            assert isinstance(reply, Acquired), f"try {index}: refused at its deadline ({now})"
        else:
            assert now > deadline and isinstance(reply, TooLate), f"try {index}: {reply}"
        if isinstance(reply, Acquired):
            release = lock_calls.release_call(keys, f"t{index}")
            assert backend.run_many([release]) == [1]
    assert at_deadline >= AT_LEAST, f"only {at_deadline} of {TRIES} tries met their deadline"


def test_a_semaphore_acquire_in_its_deadlines_millisecond_is_admitted(
    backend: Backend, redis_client: redis.Redis
) -> None:
    keys = backend.keys.semaphore("deadline-ms")
    Semaphore("warm-up", 1, client=backend).acquire(blocking=False)  # the scripts are loaded
    at_deadline = 0
    for index in range(TRIES):
        deadline = server_ms(redis_client)
        call = semaphore_calls.acquire_call(
            keys, f"t{index}", 1, 10_000, "{}", queue=False, lease_ms=0, deadline_ms=deadline
        )
        reply = semaphore_calls.decode_acquire(backend.run_many([call])[0])
        assert isinstance(reply, Acquired | TooLate), f"try {index}: {reply}"
        now = reply.server_now_ms
        if now == deadline:
            at_deadline += 1
            assert isinstance(reply, Acquired), f"try {index}: refused at its deadline ({now})"
        else:
            assert now > deadline and isinstance(reply, TooLate), f"try {index}: {reply}"
        if isinstance(reply, Acquired):
            release = semaphore_calls.release_call(keys, f"t{index}")
            assert backend.run_many([release]) == [1]
    assert at_deadline >= AT_LEAST, f"only {at_deadline} of {TRIES} tries met their deadline"


#: Ends the lock's hold now (server time): its expiry becomes this millisecond.
END_LOCK_NOW = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'expires', string.format('%.0f', now_ms))
return now_ms
"""


def test_a_release_in_the_millisecond_a_hold_ends_finds_no_hold(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """A release that runs in the very millisecond the hold ends finds no live hold (0,
    nothing written: no recent release recorded), as one a millisecond later does."""
    keys = backend.keys.lock("ending-ms")
    for index in range(20):
        lock = Lock("ending-ms", client=backend, timeout=10)
        assert lock.acquire(blocking=False)
        token = lock._current_hold().token  # type: ignore[union-attr]
        release = lock_calls.release_call(keys, token)
        with redis_client.pipeline(transaction=True) as pipe:
            pipe.eval(END_LOCK_NOW, 1, keys.lock)
            pipe.evalsha(*release.evalsha_args())
            ended_at, reply = pipe.execute()
        assert reply == 0, f"try {index}: hold ended at {ended_at} ms, release replied {reply}"
        assert redis_client.hget(keys.lock, "token") == token.encode()  # nothing written
        lock._forget(lock._current_hold())  # type: ignore[arg-type]
        redis_client.delete(keys.lock)


def test_an_extend_in_the_millisecond_a_hold_ends_does_not_revive_it(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """An extend (or a renewal) that runs in the very millisecond the hold ends finds no live
    hold (0, nothing written), as one a millisecond later does: it never revives the hold."""
    keys = backend.keys.lock("ending-extend-ms")
    warm_up = Lock("warm-up", client=backend)
    assert warm_up.acquire(blocking=False)
    warm_up.extend(1)  # the extend script is loaded
    warm_up.release()
    for index in range(20):
        token = f"t{index}"
        granted = backend.run_many([lock_calls.acquire_call(keys, token, 10_000, "{}")])[0]
        assert int(granted[0]) == 1
        extend = lock_calls.extend_call(keys, token, 10_000, "max", 60_000)
        with redis_client.pipeline(transaction=True) as pipe:
            pipe.eval(END_LOCK_NOW, 1, keys.lock)
            pipe.evalsha(*extend.evalsha_args())
            ended_at, reply = pipe.execute()
        assert [int(v) for v in reply] == [0], f"try {index}: ended at {ended_at}, got {reply}"
        assert int(redis_client.hget(keys.lock, "expires") or 0) == ended_at  # nothing written
        redis_client.delete(keys.lock)


END_SLOT_NOW = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], 'XX', now_ms, ARGV[1])
return now_ms
"""


def test_a_semaphore_ask_in_the_millisecond_its_slot_ends_is_a_new_grant(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """An acquire with a holder's own token that runs in the very millisecond the slot ends
    finds no slot to confirm (the script's prune drops it first): it is admitted anew (reply
    flag 0, a new ticket), never told that it still held (flag 1), which would revive the
    ended slot."""
    keys = backend.keys.semaphore("ending-slot-ms")
    landed = 0
    for index in range(TRIES):
        token = f"s{index}"
        grant = semaphore_calls.acquire_call(keys, token, 1, 10_000, "{}", queue=False, lease_ms=0)
        first = backend.run_many([grant])[0]
        assert int(first[0]) == 1
        with redis_client.pipeline(transaction=True) as pipe:
            pipe.eval(END_SLOT_NOW, 1, keys.holders, token)
            pipe.evalsha(*grant.evalsha_args())
            ended_at, reply = pipe.execute()
        if int(reply[3]) == ended_at:
            landed += 1
            assert int(reply[0]) == 1 and int(reply[4]) == 0, f"try {index}: {reply}"
            assert int(reply[1]) != int(first[1])  # a new ticket: a new grant
        backend.run_many([semaphore_calls.release_call(keys, token)])
        if landed >= AT_LEAST * 4:
            break
    assert landed >= AT_LEAST, f"only {landed} of the tries ran in the slot's last millisecond"

"""Every script is safe to resend. redis-py resends a command on a new connection when the
old one broke before the reply came (the Backend's own retry policy does, once): the server
ran it twice. Each operation must have exactly one effect, and report what happened.

The client talks to a real server through a proxy that cuts the connection of the next reply
(:meth:`ReplyProxy.cut_next_reply`); the server's command statistics show the script really
ran twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

import pytest
import redis

from django_redis_locks import Lock, LockLost, Semaphore
from django_redis_locks.core import Backend
from django_redis_locks.core.events import Event, subscribe, unsubscribe
from django_redis_locks.core.protocol import lock_calls
from django_redis_locks.core.protocol.holder import new_token
from django_redis_locks.core.protocol.replies import Acquired
from django_redis_locks.inspection import force_release, get_lock
from tests.helpers import Proxied, held_ttl_ms, is_held, proxied_backend


@pytest.fixture
def proxied(make_server: Any) -> Iterator[Proxied]:
    with proxied_backend(make_server(), namespace="resent", socket_timeout=5) as proxied:
        # The scripts the tests cut replies of, loaded (the acquires and releases are).
        lock = Lock("warm", client=proxied.backend)
        semaphore = Semaphore("warm", 1, client=proxied.backend)
        assert lock.acquire() and semaphore.acquire()
        lock.extend(1)
        semaphore.refresh()
        lock.release()
        semaphore.release()
        assert force_release("warm", "0" * 16, client=proxied.backend) is False
        yield proxied


def sent_twice(proxied: Proxied, call: Callable[[], Any]) -> Any:
    """Run ``call`` with the reply of its (one) script cut: redis-py sends it again."""
    before = evalsha_calls(proxied.direct)
    cuts = proxied.proxy.cuts
    proxied.proxy.cut_next_reply()
    result = call()
    assert proxied.proxy.cuts == cuts + 1, "the reply was not cut"
    assert evalsha_calls(proxied.direct) - before == 2, "the script did not run twice"
    return result


def evalsha_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0))


@pytest.fixture
def events() -> Iterator[list[Event]]:
    seen: list[Event] = []
    subscribe(seen.append)
    yield seen
    unsubscribe(seen.append)


def test_a_resent_extend_adds_its_seconds_once(proxied: Proxied) -> None:
    lock = Lock("extended", client=proxied.backend, timeout=30)
    assert lock.acquire()
    new_ttl = sent_twice(proxied, lambda: lock.extend(10))
    left_ms = held_ttl_ms(proxied.direct, lock._keys_for(proxied.backend).lock)
    assert left_ms is not None and 39_000 < left_ms <= 40_000  # not 50 s
    assert 39 < new_ttl <= 40  # and it reports the life the hold has
    lock.release()


def test_a_resent_release_of_a_lock_is_one_release(proxied: Proxied, events: list[Event]) -> None:
    lost: list[str] = []
    lock = Lock(
        "released", client=proxied.backend, timeout=30, on_lost=lambda *a: lost.append(a[1])
    )
    assert lock.acquire()
    sent_twice(proxied, lock.release)
    assert lost == []
    assert [e.event for e in events] == ["acquired", "released"]
    assert not is_held(proxied.direct, lock._keys_for(proxied.backend).lock)


def test_a_resent_semaphore_release_is_one_release_not_a_loss(
    proxied: Proxied, events: list[Event]
) -> None:
    lost: list[str] = []
    semaphore = Semaphore(
        "released", 2, client=proxied.backend, timeout=30, on_lost=lambda *a: lost.append(a[1])
    )
    other = Semaphore("released", 2, client=proxied.backend, timeout=30)
    assert semaphore.acquire() and other.acquire()  # the other holder stays: keys stay
    sent_twice(proxied, semaphore.release)  # LockLost (and on_lost) before the fix
    assert lost == []
    assert [e.event for e in events] == ["acquired", "acquired", "released"]
    assert semaphore.count() == 1
    other.release()


def test_a_resent_semaphore_release_by_its_last_holder_is_one_release(proxied: Proxied) -> None:
    semaphore = Semaphore("last", 1, client=proxied.backend, timeout=30)
    assert semaphore.acquire()
    sent_twice(proxied, semaphore.release)
    assert semaphore.count() == 0


def test_a_resent_refresh_gives_one_full_ttl(proxied: Proxied) -> None:
    semaphore = Semaphore("refreshed", 3, client=proxied.backend, timeout=30)
    assert semaphore.acquire()
    assert 29 < sent_twice(proxied, semaphore.refresh) <= 30
    assert semaphore.count() == 1
    [holder] = semaphore.holders()
    assert 29 < holder.ttl <= 30
    semaphore.release()


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_resent_acquire_is_one_grant(proxied: Proxied, kind: str) -> None:
    primitive = (
        Lock("taken", client=proxied.backend, timeout=30)
        if kind == "lock"
        else Semaphore("taken", 2, client=proxied.backend, timeout=30)
    )
    assert sent_twice(proxied, primitive.acquire) is True
    if isinstance(primitive, Lock):
        info = get_lock("taken", client=proxied.backend)
        assert info is not None and info.fence == primitive.fence
    else:
        assert primitive.count() == 1
    primitive.release()


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_resent_force_release_evicts_once_and_says_so(
    proxied: Proxied, events: list[Event], kind: Literal["lock", "semaphore"]
) -> None:
    primitive = (
        Lock("evicted", client=proxied.backend, timeout=30)
        if kind == "lock"
        else Semaphore("evicted", 2, client=proxied.backend, timeout=30)
    )
    assert primitive.acquire()
    holder = primitive.holder_id
    assert holder is not None
    forced = sent_twice(
        proxied, lambda: force_release("evicted", holder, kind=kind, client=proxied.backend)
    )
    assert forced is True  # False before the fix: the resend found nothing to evict
    # Another request for the same eviction came too late: nothing to evict any more.
    assert force_release("evicted", holder, kind=kind, client=proxied.backend) is False
    assert [e.event for e in events] == ["acquired", "force_released"]
    renew: Callable[[], Any] = (
        (lambda: primitive.extend(5)) if isinstance(primitive, Lock) else primitive.refresh
    )
    with pytest.raises(LockLost, match="force-released"):
        renew()


def test_a_late_copy_of_an_extend_after_a_renewal_still_counts_once(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """An extend is recognised as resent by its sequence number; a renewal in between (which
    has none) must not make the lock forget the last one applied: the late copy adds nothing."""
    keys = backend.keys.lock("extended-then-renewed")
    token = new_token()
    granted = lock_calls.decode_acquire(
        backend.run_many([lock_calls.acquire_call(keys, token, 30_000, "{}")])[0]
    )
    assert isinstance(granted, Acquired)
    extend = lock_calls.extend_call(keys, token, 10_000, "add", 3_600_000, seq=1)
    renewal = lock_calls.extend_call(keys, token, 30_000, "max", 3_600_000)
    for call in (extend, renewal, extend):  # the last: the extend's late copy
        assert int(backend.run_many([call])[0][0]) == 1
    left_ms = held_ttl_ms(redis_client, keys.lock)
    assert left_ms is not None and 39_000 < left_ms <= 40_000  # not 50 s


def test_a_resent_release_is_recognised_after_another_tokens_hold_ended_twice(
    backend: Backend,
) -> None:
    """The recent releases keep every other holder's entry when one token's hold ends a
    second time (a late copy of its acquire granted it again, and that grant was released):
    the list is rebuilt with that token's newer entry, and B's resent release is still
    recognised (3), not taken for a release of nothing (0)."""
    keys = backend.keys.lock("ended-twice")
    t, b = new_token(), new_token()

    def run(call: Any) -> Any:
        return backend.run_many([call])[0]

    for token in (t, b):
        assert int(run(lock_calls.acquire_call(keys, token, 30_000, "{}"))[0]) == 1
        assert run(lock_calls.release_call(keys, token)) == 1
    assert int(run(lock_calls.acquire_call(keys, t, 30_000, "{}"))[0]) == 1  # the late copy
    assert run(lock_calls.release_call(keys, t)) == 1  # undone: t's hold ended twice
    assert run(lock_calls.release_call(keys, b)) == 3  # B's release, resent: recognised

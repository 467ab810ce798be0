"""What a listing says of who waits, how long a hold has been held and whether it is renewed.

A lock's and a semaphore's record name their waiters in queue order, each with the id its hold
will have (never its token), where it runs, when it came and until when its place is kept; a
waiter handed the hold is no longer counted. ``held`` counts from the grant; ``renewed`` and
``renewed_every`` come from the holder's metadata (``auto_renew``).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from django_redis_locks import Lock, Semaphore
from django_redis_locks.core import Backend
from django_redis_locks.core.protocol.holder import holder_id
from django_redis_locks.core.protocol.replies import Contended
from django_redis_locks.inspection import (
    WaiterInfo,
    get_lock,
    get_semaphore,
    list_locks,
    list_semaphores,
)
from tests.core.test_lock_queue import ask
from tests.harness.servers import wait_until


def server_now(client: redis.Redis) -> datetime:
    seconds, micros = client.time()
    return datetime.fromtimestamp(seconds + micros / 1_000_000, tz=UTC)


class Waiter:
    """A thread blocked in ``acquire`` on ``primitive`` until it gets it, then holding it
    until told to let go."""

    def __init__(self, primitive: Lock | Semaphore, name: str) -> None:
        self.primitive = primitive
        self.got = threading.Event()
        self.done = threading.Event()
        self.holder_id: str | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        if self.primitive.acquire(timeout=20):
            self.holder_id = self.primitive.holder_id
            self.got.set()
            self.done.wait(20)
            self.primitive.release()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(25)


@pytest.fixture
def waiters() -> Iterator[list[Waiter]]:
    started: list[Waiter] = []
    yield started
    for waiter in started:
        waiter.stop()


def queue_up(
    started: list[Waiter], make: Callable[[str], Lock | Semaphore], waiting: Callable[[], int]
) -> None:
    """Two waiters, "first" then "second", each seen waiting before the next comes."""
    for index, label in enumerate(("first", "second"), start=1):
        started.append(Waiter(make(label), f"waiter-{label}"))

        def queued(index: int = index) -> bool:
            return waiting() == index

        wait_until(queued, timeout=5, what=f"{label} waiting")


def assert_waiters(shown: tuple[WaiterInfo, ...], now: datetime, kind: str, name: str) -> None:
    assert [w.label for w in shown] == ["first", "second"]
    assert shown[0].queued_at <= shown[1].queued_at
    for waiter in shown:
        assert (waiter.kind, waiter.name) == (kind, name)
        assert waiter.host == socket.gethostname() and waiter.pid == os.getpid()
        assert waiter.thread is not None and waiter.thread.startswith(f"waiter-{waiter.label} (")
        assert now - timedelta(seconds=5) <= waiter.queued_at <= now + timedelta(seconds=1)
        assert waiter.lease_expires_at > now
        assert 0 <= waiter.waited < 5
        assert len(waiter.holder_id) == 16


def test_a_locks_waiters_are_listed_in_queue_order_with_the_id_their_hold_gets(
    backend: Backend, redis_client: redis.Redis, waiters: list[Waiter]
) -> None:
    holder = Lock("report", client=backend, timeout=30, metadata={"label": "holder"})
    assert holder.acquire()

    def waiting() -> int:
        info = get_lock("report", client=backend)
        return info.waiting if info is not None else -1

    queue_up(
        waiters,
        lambda label: Lock("report", client=backend, timeout=30, metadata={"label": label}),
        waiting,
    )
    now = server_now(redis_client)
    info = get_lock("report", client=backend)
    assert info is not None and info.holder_id == holder.holder_id
    assert info.waiting == 2
    assert_waiters(info.waiters, now, "lock", "report")
    [listed] = list_locks(client=backend).items
    assert (listed.waiting, [w.holder_id for w in listed.waiters]) == (
        2,
        [w.holder_id for w in info.waiters],
    )
    tokens: list[Any] = []  # the queue's: tokens are never shown
    for key in redis_client.keys("*lockq:report"):
        tokens.extend(redis_client.zrange(key, 0, -1))
    assert len(tokens) == 2
    assert not [token for token in tokens if token.decode() in repr(info)]

    holder.release()
    assert waiters[0].got.wait(5)
    assert waiters[0].holder_id == info.waiters[0].holder_id  # the id its hold has now
    after = get_lock("report", client=backend)
    assert after is not None and after.holder_id == waiters[0].holder_id
    assert after.waiting == 1 and [w.label for w in after.waiters] == ["second"]


def test_a_semaphores_waiters_are_listed_in_queue_order_with_the_id_their_hold_gets(
    backend: Backend, redis_client: redis.Redis, waiters: list[Waiter]
) -> None:
    holder = Semaphore("exports", 1, client=backend, timeout=30, metadata={"label": "holder"})
    assert holder.acquire()

    def waiting() -> int:
        info = get_semaphore("exports", client=backend)
        return info.waiting if info is not None else -1

    queue_up(
        waiters,
        lambda label: Semaphore(
            "exports", 1, client=backend, timeout=30, metadata={"label": label}
        ),
        waiting,
    )
    now = server_now(redis_client)
    info = get_semaphore("exports", client=backend)
    assert info is not None and info.waiting == 2
    assert_waiters(info.waiters, now, "semaphore", "exports")
    [listed] = list_semaphores(client=backend).items
    assert [w.holder_id for w in listed.waiters] == [w.holder_id for w in info.waiters]

    holder.release()
    assert waiters[0].got.wait(5)
    assert waiters[0].holder_id == info.waiters[0].holder_id
    after = get_semaphore("exports", client=backend)
    assert after is not None and [h.holder_id for h in after.holders] == [waiters[0].holder_id]
    assert [w.label for w in after.waiters] == ["second"]


def test_a_lock_nobody_waits_for_says_so(backend: Backend) -> None:
    lock = Lock("quiet", client=backend, timeout=30)
    assert lock.acquire()
    info = get_lock("quiet", client=backend)
    assert info is not None and (info.waiting, info.waiters) == (0, ())
    lock.release()


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_held_counts_from_the_grant(backend: Backend, kind: str) -> None:
    primitive: Any = (
        Lock("held", client=backend, timeout=30)
        if kind == "lock"
        else Semaphore("held", 2, client=backend, timeout=30)
    )
    assert primitive.acquire()
    time.sleep(0.4)
    info: Any = get_lock("held", client=backend)
    if kind == "semaphore":
        info = get_semaphore("held", client=backend).holders[0]  # type: ignore[union-attr]
    assert 0.4 <= info.held < 3
    primitive.release()


@pytest.mark.parametrize(
    ("options", "renewed", "every"),
    [
        ({"timeout": 6, "auto_renew": True}, True, 2.0),
        ({"timeout": 1, "auto_renew": True}, True, 0.3),
        ({"auto_renew": True}, True, None),  # the configured default TTL: not known here
        ({"timeout": 6}, False, None),
    ],
)
@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_the_metadata_says_whether_and_how_often_a_hold_is_renewed(
    backend: Backend, kind: str, options: dict[str, Any], renewed: bool, every: float | None
) -> None:
    metadata = {"label": "job"}
    primitive: Any = (
        Lock("renewal", client=backend, metadata=metadata, **options)
        if kind == "lock"
        else Semaphore("renewal", 2, client=backend, metadata=metadata, **options)
    )
    assert primitive.acquire()
    info: Any = get_lock("renewal", client=backend)
    if kind == "semaphore":
        info = get_semaphore("renewal", client=backend).holders[0]  # type: ignore[union-attr]
    assert (info.renewed, info.renewed_every, info.label) == (renewed, every, "job")
    assert primitive.metadata == metadata  # the caller's own metadata is left as given
    primitive.release()


def test_a_waiter_whose_place_ran_out_is_not_listed(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """A waiter that stopped asking (its process died) keeps its place until the lease runs
    out and a script drops it; meanwhile the listing leaves it out, and counts only the live
    one behind it."""
    holder = Lock("dead-waiter", client=backend, timeout=30)
    assert holder.acquire(blocking=False)
    keys = backend.keys.lock("dead-waiter")
    assert isinstance(ask(backend, keys, "gone-away", 100), Contended)
    assert isinstance(ask(backend, keys, "still-here", 20_000), Contended)

    def lease_over() -> bool:
        seconds, micros = redis_client.time()
        lease = redis_client.zscore(keys.leases, "gone-away")
        return lease is not None and lease < seconds * 1000 + micros // 1000

    wait_until(lease_over, timeout=5, what="the first place's lease to run out")
    info = get_lock("dead-waiter", client=backend)
    assert info is not None
    assert info.waiting == 1
    assert [w.holder_id for w in info.waiters] == [holder_id("still-here")]
    holder.release()


def test_a_listing_forgets_an_expired_registry_entry_from_both_lists(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """The registry's name list and expiry list hold the same members: a listing that drops
    an expired entry drops it from both (lib/registry's registry_prune)."""
    lock = Lock("short-lived", client=backend, timeout=30)
    assert lock.acquire(blocking=False)
    lock.release()
    registry = backend.keys.lock("short-lived").registry
    redis_client.zadd(registry.expiry, {"lock:short-lived": 1})  # (its entry long expired)
    list_locks(client=backend)
    assert redis_client.zscore(registry.expiry, "lock:short-lived") is None
    assert redis_client.zscore(registry.names, "lock:short-lived") is None

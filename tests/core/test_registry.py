"""The inspection API on real servers: listings, paging, scale, Cluster and force-release.

``list_locks`` / ``list_semaphores`` read the per-bucket registries that the scripts keep, so
these tests check what a listing shows (holder, times, fence, semaphore counts), that paging
gives every live entry exactly once, that released, expired and crashed holds vanish without
help, that the first page stays cheap among 10,000 locks and 1,000,000 other keys, and that
``force_release`` evicts exactly the hold a listing showed, and nothing else.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import json
import os
import queue
import random
import socket
import string
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest
import redis

from django_redis_locks import Lock, LockLost, Semaphore
from django_redis_locks import inspect as inspect_api
from django_redis_locks.core import Backend, InvalidArgument, InvalidArgumentType
from django_redis_locks.core.protocol import lock_calls as lock_protocol
from django_redis_locks.core.protocol.constants import REGISTRY_AHEAD_MS, RETENTION_MS
from django_redis_locks.core.protocol.holder import holder_metadata, metadata_json, new_token
from django_redis_locks.core.protocol.keys import KeySpace
from django_redis_locks.core.protocol.scripting import load
from django_redis_locks.inspection import (
    MAX_PAGE_SIZE,
    HolderInfo,
    Page,
    SemaphoreInfo,
    force_release,
    get_lock,
    get_semaphore,
    list_locks,
    list_semaphores,
)
from tests.harness.servers import wait_until
from tests.helpers import is_held, server_ms

T = TypeVar("T")
Kind = Literal["lock", "semaphore"]
REPO = Path(__file__).resolve().parents[2]
LABEL = "app.views.charge"


# -- helpers ------------------------------------------------------------------------------
def every_page(
    lister: Callable[..., Page[T]], cursor: str | None = None, **kwargs: Any
) -> list[list[T]]:
    """All pages of a listing from ``cursor`` on, following the cursor until it is None."""
    pages: list[list[T]] = []
    for _ in range(10_000):
        page = lister(cursor=cursor, **kwargs)
        pages.append(page.items)
        cursor = page.cursor
        if cursor is None:
            return pages
    raise AssertionError("the listing never ended")


def every_item(lister: Callable[..., Page[T]], cursor: str | None = None, **kwargs: Any) -> list[T]:
    return [item for page in every_page(lister, cursor, **kwargs) for item in page]


def listing_order(name: str) -> tuple[int, bytes]:
    """Where a name comes in a listing: bucket order, then byte order within the bucket."""
    return KeySpace.bucket(name), name.encode("utf-8")


def server_now(client: redis.Redis) -> datetime:
    seconds, micros = client.time()
    return datetime.fromtimestamp(seconds + micros / 1_000_000, tz=UTC)


def namespace_dump(client: redis.Redis, namespace: str) -> dict[bytes, bytes | None]:
    """Every key of the namespace with its serialized value (changes when anything is written)."""
    return {key: client.dump(key) for key in client.scan_iter(match=f"{namespace}:*")}


def current_holder_id(primitive: Lock | Semaphore) -> str | None:
    """The primitive's holder id right now (a call, so that type checkers do not narrow it)."""
    return primitive.holder_id


def token_of(primitive: Lock | Semaphore) -> str:
    hold = primitive._current_hold()
    assert hold is not None
    return hold.token


def random_names(count: int, seed: int) -> list[str]:
    """``count`` distinct names with separators, braces, spaces and non-ASCII characters."""
    alphabet = string.ascii_letters + string.digits + ":{}-_/ é中"
    rng = random.Random(seed)
    names: set[str] = set()
    while len(names) < count:
        names.add("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))))
    return sorted(names)


@pytest.fixture
def cluster_backend(redis_cluster: Any, namespace: str) -> Iterator[Backend]:
    client = redis_cluster.client(socket_timeout=5)
    yield Backend(client, namespace=namespace)
    client.close()


# -- what a listing shows -----------------------------------------------------------------
def test_lock_listing_shows_holder_metadata_server_times_ttl_and_fence(
    backend: Backend, redis_client: redis.Redis
) -> None:
    lock = Lock("order:1", client=backend, timeout=5, metadata={"label": LABEL})
    assert lock.acquire()
    now = server_now(redis_client)
    page = list_locks(client=backend)
    assert page.cursor is None
    [info] = page.items
    assert isinstance(info, HolderInfo)
    assert info.name == "order:1" and info.kind == "lock"
    assert info.holder_id == lock.holder_id
    assert info.host == socket.gethostname()
    assert info.pid == os.getpid()
    thread = threading.current_thread()
    assert info.thread == f"{thread.name} ({thread.ident})"
    assert info.task is None
    assert info.label == LABEL
    assert info.metadata["label"] == LABEL
    assert info.fence == lock.fence and info.ticket is None
    assert info.acquired_at.tzinfo is UTC and info.expires_at.tzinfo is UTC
    assert info.expires_at - info.acquired_at == timedelta(seconds=5)
    assert now - timedelta(seconds=1) <= info.acquired_at <= now  # the server's clock
    assert 4.0 < info.ttl <= 5.0
    looked_up = get_lock("order:1", client=backend)
    assert looked_up is not None
    # (Read a moment apart: what time shows may differ by that moment.)
    assert dataclasses.replace(looked_up, ttl=info.ttl, held=info.held) == info
    assert get_lock("order:2", client=backend) is None
    lock.release()


def test_lock_listing_names_the_asyncio_task_that_holds(backend: Backend) -> None:
    async def hold() -> HolderInfo:
        lock = Lock("feed:9", client=backend, timeout=5, metadata={"label": "feeds.refresh"})
        assert await lock.aacquire()
        try:
            page = await asyncio.to_thread(list_locks, client=backend)
            [info] = page.items
            assert info.holder_id == lock.holder_id
        finally:
            await lock.arelease()
        return info

    async def main() -> HolderInfo:
        return await asyncio.create_task(hold(), name="refresh-feed-9")

    info = asyncio.run(main())
    assert info.task == "refresh-feed-9"
    assert info.thread == f"{threading.current_thread().name} ({threading.get_ident()})"
    assert info.label == "feeds.refresh" and info.pid == os.getpid()
    assert list_locks(client=backend).items == []


def test_semaphore_listing_shows_limit_count_waiting_and_every_holder(
    backend: Backend, redis_client: redis.Redis
) -> None:
    first = Semaphore("exports", 2, client=backend, timeout=8, metadata={"label": "export.a"})
    second = Semaphore("exports", 2, client=backend, timeout=8, metadata={"label": "export.b"})
    assert first.acquire()
    assert second.acquire()
    queued = Semaphore("exports", 2, client=backend, timeout=8, metadata={"label": "export.c"})
    admitted = threading.Event()
    done = threading.Event()
    outcome: list[bool] = []

    def wait_for_a_slot() -> None:
        outcome.append(queued.acquire(timeout=10))
        admitted.set()
        done.wait(10)
        if outcome[0]:
            queued.release()

    waiter = threading.Thread(target=wait_for_a_slot, name="export-waiter")
    waiter.start()
    try:
        wait_until(
            lambda: [s.waiting for s in list_semaphores(client=backend).items] == [1],
            timeout=5,
            what="the waiter to show in the listing",
        )
        now = server_now(redis_client)
        page = list_semaphores(client=backend)
        assert page.cursor is None
        [info] = page.items
        assert isinstance(info, SemaphoreInfo)
        assert info.name == "exports"
        assert (info.limit, info.count, info.waiting) == (2, 2, 1)
        assert {h.holder_id for h in info.holders} == {first.holder_id, second.holder_id}
        assert {h.label for h in info.holders} == {"export.a", "export.b"}
        assert [h.expires_at for h in info.holders] == sorted(h.expires_at for h in info.holders)
        for holder in info.holders:
            assert holder.name == "exports" and holder.kind == "semaphore"
            assert holder.host == socket.gethostname() and holder.pid == os.getpid()
            assert holder.task is None and holder.fence is None
            assert isinstance(holder.ticket, int) and holder.ticket > 0
            assert holder.expires_at - holder.acquired_at == timedelta(seconds=8)
            assert now - timedelta(seconds=1) <= holder.acquired_at <= now
            assert 7.0 < holder.ttl <= 8.0
        tickets = {h.label: h.ticket or 0 for h in info.holders}
        assert 0 < tickets["export.a"] < tickets["export.b"]  # arrival order
        looked_up = get_semaphore("exports", client=backend)
        assert looked_up is not None
        assert (looked_up.limit, looked_up.count, looked_up.waiting) == (2, 2, 1)
        first.release()
        assert admitted.wait(5) and outcome == [True]
        later = get_semaphore("exports", client=backend)
        assert later is not None and (later.count, later.waiting) == (2, 0)
        assert {h.label for h in later.holders} == {"export.b", "export.c"}
        [newcomer] = [h for h in later.holders if h.label == "export.c"]
        assert newcomer.thread is not None and newcomer.thread.startswith("export-waiter (")
    finally:
        done.set()
        waiter.join(10)
    second.release()
    assert list_semaphores(client=backend).items == []
    assert get_semaphore("exports", client=backend) is None


def test_prefix_filter_lists_only_names_that_start_with_it(backend: Backend) -> None:
    names = ["order:1", "order:2", "order:10", "order:é", "order", "orders", "ORDER:3", "border:4"]
    locks = [Lock(name, client=backend, timeout=10) for name in names]
    for lock in locks:
        assert lock.acquire()
    listed = {info.name for info in list_locks("order:", client=backend).items}
    assert listed == {"order:1", "order:2", "order:10", "order:é"}
    listed = {info.name for info in list_locks("order", client=backend).items}
    assert listed == {"order:1", "order:2", "order:10", "order:é", "order", "orders"}
    assert [i.name for i in list_locks("order:é", client=backend).items] == ["order:é"]
    assert list_locks("invoice:", client=backend) == Page(items=[], cursor=None)
    by_one = [i.name for i in every_item(list_locks, prefix="order:", count=1, client=backend)]
    assert sorted(by_one, key=listing_order) == by_one
    assert set(by_one) == {"order:1", "order:2", "order:10", "order:é"} and len(by_one) == 4
    for lock in locks:
        lock.release()


def test_paging_250_locks_by_40_gives_each_exactly_once_in_bucket_then_name_order(
    backend: Backend,
) -> None:
    names = [f"order:{i}" for i in range(250)]
    locks = [Lock(name, client=backend, timeout=30) for name in names]
    for lock in locks:
        assert lock.acquire()
    other = Lock("invoice:1", client=backend, timeout=30)
    assert other.acquire()
    pages = every_page(list_locks, prefix="order:", count=40, client=backend)
    assert [len(page) for page in pages] == [40, 40, 40, 40, 40, 40, 10]
    listed = [info.name for page in pages for info in page]
    assert len(listed) == len(set(listed)) == 250
    assert set(listed) == set(names)
    assert listed == sorted(names, key=listing_order)
    holder_ids = {info.name: info.holder_id for page in pages for info in page}
    assert all(holder_ids[lock.name] == lock.holder_id for lock in locks)
    everything = [info.name for info in every_item(list_locks, count=MAX_PAGE_SIZE, client=backend)]
    assert sorted(everything) == sorted([*names, "invoice:1"])
    for lock in [*locks, other]:
        lock.release()
    assert list_locks(client=backend).items == []


def test_paging_stays_exact_while_entries_come_and_go_between_pages(backend: Backend) -> None:
    locks = {
        f"batch:{i:03d}": Lock(f"batch:{i:03d}", client=backend, timeout=30) for i in range(120)
    }
    for lock in locks.values():
        assert lock.acquire()
    first = list_locks("batch:", count=30, client=backend)
    assert first.cursor is not None
    seen = [info.name for info in first.items]
    unseen = sorted(set(locks) - set(seen), key=listing_order)
    # The cursor's own entry, an earlier one and a few not listed yet are released.
    gone = {seen[-1], seen[0], unseen[0], unseen[10], unseen[-1]}
    for name in gone:
        locks.pop(name).release()
    newcomers = [Lock(f"batch:new{i}", client=backend, timeout=30) for i in range(5)]
    for lock in newcomers:
        assert lock.acquire()
    rest = every_item(list_locks, first.cursor, prefix="batch:", count=30, client=backend)
    rest_names = [info.name for info in rest]
    listed = seen + rest_names
    assert len(listed) == len(set(listed)), "an entry was listed twice"
    assert set(locks) <= set(listed), "an entry live throughout was missed"
    assert not (gone - set(seen)) & set(rest_names), "a released entry was listed"
    for lock in [*locks.values(), *newcomers]:
        lock.release()


def test_released_and_expired_entries_vanish_from_listings(
    backend: Backend, redis_client: redis.Redis
) -> None:
    released = Lock("report:daily", client=backend, timeout=30)
    assert released.acquire()
    released.release()
    assert get_lock("report:daily", client=backend) is None
    crashed = Lock("report:hourly", client=backend, timeout=0.2)  # never released
    assert crashed.acquire()
    slot = Semaphore("report:slots", 3, client=backend, timeout=0.2)  # never released
    assert slot.acquire()
    assert [i.name for i in list_locks(client=backend).items] == ["report:hourly"]
    assert [s.name for s in list_semaphores(client=backend).items] == ["report:slots"]
    wait_until(
        lambda: list_locks(client=backend).items == [],
        timeout=5,
        what="the expired lock to leave the listing",
    )
    wait_until(
        lambda: list_semaphores(client=backend).items == [],
        timeout=5,
        what="the expired semaphore to leave the listing",
    )
    assert get_lock("report:hourly", client=backend) is None
    assert get_semaphore("report:slots", client=backend) is None
    # The entries stay a while (kept lazily, lib/registry.lua): listings skip them, and they
    # go at most REGISTRY_AHEAD_MS after the name's hash expires.
    now_ms = server_ms(redis_client)
    for member, registry in (
        ("lock:report:daily", backend.keys.lock("report:daily").registry),
        ("lock:report:hourly", backend.keys.lock("report:hourly").registry),
        ("sem:report:slots", backend.keys.semaphore("report:slots").registry),
    ):
        kept = redis_client.zscore(registry.expiry, member)
        assert kept is not None and redis_client.zscore(registry.names, member) is not None
        assert kept <= now_ms + RETENTION_MS + 60_000 + REGISTRY_AHEAD_MS


def test_a_crashed_holders_keys_expire_without_any_listing_or_release(
    backend: Backend, redis_client: redis.Redis
) -> None:
    crashed = Lock("import:1", client=backend, timeout=0.2)
    assert crashed.acquire()
    slot = Semaphore("import:slots", 2, client=backend, timeout=0.2)
    assert slot.acquire()
    namespace = backend.keys.namespace
    registries = {
        backend.keys.lock("import:1").registry.names,
        backend.keys.lock("import:1").registry.expiry,
        backend.keys.semaphore("import:slots").registry.names,
        backend.keys.semaphore("import:slots").registry.expiry,
    }
    assert all(redis_client.exists(key) for key in registries)

    semaphore_keys = {
        backend.keys.semaphore("import:slots").holders.encode(),
        backend.keys.semaphore("import:slots").info.encode(),
    }

    def nothing_held() -> bool:
        # The lock's hash stays a while after its hold, for its fence; the semaphore's keys
        # (the expired holder in them) expire with its registry entry, as its info hash (see
        # lib/semaphore's semaphore_keep); the registry's entries a while after that (kept
        # lazily); nothing else is left, and nothing is held.
        keys = set(redis_client.scan_iter(match=f"{namespace}:*"))
        lock_hash = backend.keys.lock("import:1").lock.encode()
        kept = {lock_hash, *semaphore_keys, *(key.encode() for key in registries)}
        return keys <= kept and not is_held(redis_client, lock_hash) and slot.count() == 0

    wait_until(nothing_held, timeout=10, what="the crashed holds to run out")
    assert list_locks(client=backend).items == []
    assert list_semaphores(client=backend).items == []
    for kept_key in semaphore_keys:  # (its expired holder goes at the next look, else then)
        assert redis_client.pttl(kept_key) <= 200 + 1_000 + RETENTION_MS + REGISTRY_AHEAD_MS
    # ... and the registry's keys expire too, within the footprint's bound (10 minutes).
    for key in registries:
        assert 0 < redis_client.pttl(key) <= RETENTION_MS + 60_000 + REGISTRY_AHEAD_MS + 3_000


def test_locks_and_semaphores_of_one_name_are_listed_apart(backend: Backend) -> None:
    lock = Lock("shared", client=backend, timeout=10, metadata={"label": "as-lock"})
    semaphore = Semaphore("shared", 2, client=backend, timeout=10, metadata={"label": "as-sem"})
    assert lock.acquire() and semaphore.acquire()
    [lock_info] = list_locks(client=backend).items
    [sem_info] = list_semaphores(client=backend).items
    assert (lock_info.name, lock_info.kind, lock_info.label) == ("shared", "lock", "as-lock")
    assert lock_info.holder_id == lock.holder_id
    assert sem_info.name == "shared" and sem_info.count == 1
    assert sem_info.holders[0].label == "as-sem"
    assert sem_info.holders[0].holder_id == semaphore.holder_id
    # A holder id of one kind does not evict the other kind's holder.
    assert lock.holder_id is not None and semaphore.holder_id is not None
    assert not force_release("shared", lock.holder_id, kind="semaphore", client=backend)
    assert not force_release("shared", semaphore.holder_id, kind="lock", client=backend)
    assert lock.ensure_held() > 0 and semaphore.ensure_held() > 0
    lock.release()
    assert list_locks(client=backend).items == []
    assert [s.name for s in list_semaphores(client=backend).items] == ["shared"]
    semaphore.release()


def test_a_plain_redis_client_and_a_django_alias_reach_the_same_listing(
    redis_client: redis.Redis, namespace: str
) -> None:
    name = f"{namespace}:via-client"  # in the default namespace, shared by the session
    lock = Lock(name, client=redis_client, timeout=10)
    assert lock.acquire()
    [shown] = list_locks(f"{namespace}:", client=redis_client).items
    assert shown.name == name and shown.holder_id == lock.holder_id
    assert [i.holder_id for i in list_locks(f"{namespace}:").items] == [lock.holder_id]
    via_alias = get_lock(name, using="locks")
    assert via_alias is not None and via_alias.holder_id == lock.holder_id
    assert force_release(name, shown.holder_id, using="locks") is True
    assert get_lock(name, client=redis_client) is None
    with pytest.raises(LockLost):
        lock.release()


# -- bad arguments ------------------------------------------------------------------------
def _cursor(raw: bytes) -> str:
    """A cursor made by hand (what a listing would encode for ``raw``)."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


BadCall = Callable[[Backend, str], object]
api: Any = inspect_api  # untyped, so that the wrong types below reach the checks
ValueErr, TypeErr = InvalidArgument, InvalidArgumentType
BAD_CALLS: list[tuple[str, BadCall, type[Exception]]] = [
    ("count 0", lambda b, h: api.list_locks(count=0, client=b), ValueErr),
    ("count max+1", lambda b, h: api.list_locks(count=MAX_PAGE_SIZE + 1, client=b), ValueErr),
    ("count -1", lambda b, h: api.list_semaphores(count=-1, client=b), ValueErr),
    ("bool count", lambda b, h: api.list_locks(count=True, client=b), TypeErr),
    ("float count", lambda b, h: api.list_semaphores(count=10.0, client=b), TypeErr),
    ("str count", lambda b, h: api.list_locks(count="10", client=b), TypeErr),
    ("int prefix", lambda b, h: api.list_locks(5, client=b), TypeErr),
    ("bytes prefix", lambda b, h: api.list_semaphores(b"x", client=b), TypeErr),
    ("None prefix", lambda b, h: api.list_locks(None, client=b), TypeErr),
    ("control prefix", lambda b, h: api.list_locks("a\nb", client=b), ValueErr),
    ("garbage cursor", lambda b, h: api.list_locks(cursor="not a cursor!", client=b), ValueErr),
    ("empty cursor", lambda b, h: api.list_locks(cursor="", client=b), ValueErr),
    ("int cursor", lambda b, h: api.list_locks(cursor=7, client=b), TypeErr),
    ("bucket 256", lambda b, h: api.list_locks(cursor=_cursor(b"256:x"), client=b), ValueErr),
    ("bucket -1", lambda b, h: api.list_locks(cursor=_cursor(b"-1:x"), client=b), ValueErr),
    ("no name", lambda b, h: api.list_semaphores(cursor=_cursor(b"3:"), client=b), ValueErr),
    ("not utf-8", lambda b, h: api.list_locks(cursor=_cursor(b"3:\xff"), client=b), ValueErr),
    ("using+client", lambda b, h: api.list_locks(using="locks", client=b), ValueErr),
    ("upper-case id", lambda b, h: api.force_release("x", h.upper(), client=b), ValueErr),
    ("short id", lambda b, h: api.force_release("x", h[:15], client=b), ValueErr),
    ("long id", lambda b, h: api.force_release("x", h + "0", client=b), ValueErr),
    ("non-hex id", lambda b, h: api.force_release("x", "g" * 16, client=b), ValueErr),
    ("token as id", lambda b, h: api.force_release("x", new_token(), client=b), ValueErr),
    ("int id", lambda b, h: api.force_release("x", 12, client=b), TypeErr),
    ("None id", lambda b, h: api.force_release("x", None, client=b), TypeErr),
    ("kind other", lambda b, h: api.force_release("x", h, kind="other", client=b), ValueErr),
    ("kind None", lambda b, h: api.force_release("x", h, kind=None, client=b), ValueErr),
    ("empty name", lambda b, h: api.force_release("", h, client=b), ValueErr),
    ("int name", lambda b, h: api.get_lock(3, client=b), TypeErr),
    ("empty sem name", lambda b, h: api.get_semaphore("", client=b), ValueErr),
]


@pytest.mark.parametrize(
    ("call", "error"),
    [pytest.param(call, error, id=name) for name, call, error in BAD_CALLS],
)
def test_bad_arguments_raise_and_write_nothing(
    backend: Backend,
    redis_client: redis.Redis,
    namespace: str,
    call: BadCall,
    error: type[Exception],
) -> None:
    lock = Lock("x", client=backend, timeout=30)
    semaphore = Semaphore("x", 2, client=backend, timeout=30)
    crashed = Lock("y", client=backend, timeout=0.05)  # a registry entry to prune
    assert lock.acquire() and semaphore.acquire() and crashed.acquire()
    wait_until(lambda: not crashed.locked(), timeout=5, what="the short lock to expire")
    before = namespace_dump(redis_client, namespace)
    assert lock.holder_id is not None
    with pytest.raises(error) as raised:
        call(backend, lock.holder_id)
    assert isinstance(raised.value, ValueError if error is InvalidArgument else TypeError)
    assert namespace_dump(redis_client, namespace) == before
    assert lock.ensure_held() > 0 and semaphore.ensure_held() > 0
    lock.release()
    semaphore.release()


# -- scale --------------------------------------------------------------------------------
def test_first_page_among_10000_locks_and_1000000_other_keys_is_cheap(
    make_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = make_server()
    client = server.client(socket_timeout=30)
    pipe = client.pipeline(transaction=False)
    for batch in range(1000):
        pipe.execute_command(
            "MSET",
            *(
                part
                for i in range(batch * 1000, batch * 1000 + 1000)
                for part in (f"cache:{i}", "v")
            ),
        )
        if batch % 100 == 99:
            pipe.execute()
    backend = Backend(client, namespace="drl")
    names = [f"job:{i:05d}" for i in range(10_000)]
    metadata = holder_metadata(threading.current_thread(), metadata_json({"label": "bench"}))
    for start in range(0, len(names), 1000):
        replies = backend.run_many(
            [
                lock_protocol.acquire_call(backend.keys.lock(name), new_token(), 120_000, metadata)
                for name in names[start : start + 1000]
            ]
        )
        assert all(int(reply[0]) == 1 for reply in replies)
    assert client.dbsize() >= 1_000_000 + 10_000  # + the registries
    for script in ("registry_page", "lock_inspect"):  # as on a server that has seen listings
        client.script_load(load(script).source)

    round_trips: list[int] = []
    run_many = backend.run_many

    def counting_run_many(calls: Sequence[Any]) -> list[Any]:
        round_trips.append(len(calls))
        return run_many(calls)

    monkeypatch.setattr(backend, "run_many", counting_run_many)
    before = client.info("commandstats")
    started = time.perf_counter()
    page = list_locks(client=backend, count=100)
    elapsed = time.perf_counter() - started
    after = client.info("commandstats")

    def calls(stats: dict[str, Any], command: str) -> int:
        return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))

    evalsha = calls(after, "evalsha") - calls(before, "evalsha")
    print(
        f"\nfirst page of 100 among 10,000 locks and 1,000,000 other keys: "
        f"{elapsed * 1000:.1f} ms, {len(round_trips)} round trips ({round_trips} scripts), "
        f"{evalsha} EVALSHA; inside the scripts: "
        + ", ".join(
            f"{cmd} {calls(after, cmd) - calls(before, cmd)}"
            for cmd in ("time", "zrangebyscore", "zrangebylex", "hmget", "pttl")
        )
    )
    assert [info.name for info in page.items] == sorted(names, key=listing_order)[:100]
    assert page.cursor is not None
    assert all(info.label == "bench" for info in page.items)
    assert len(round_trips) <= 3
    assert evalsha <= 40
    assert sum(round_trips) == evalsha
    assert calls(after, "keys") == calls(after, "scan") == 0, "KEYS or SCAN was called"
    assert calls(after, "script|load") == calls(before, "script|load")  # no NOSCRIPT retry
    assert elapsed < 1.0
    second = list_locks(client=backend, count=100, cursor=page.cursor)
    assert [info.name for info in second.items] == sorted(names, key=listing_order)[100:200]
    # A large page reads about what it returns: the buckets read after the first round trip
    # follow the density seen so far.
    read: list[int] = []

    def reading_run_many(calls: Sequence[Any]) -> list[Any]:
        replies = run_many(calls)
        pages = [r for c, r in zip(calls, replies, strict=True) if c.script.name == "registry_page"]
        read.extend(len(members) for members in pages)
        return replies

    monkeypatch.setattr(backend, "run_many", reading_run_many)
    big = list_locks(client=backend, count=1000)
    print(f"a page of 1,000 read {sum(read)} registry entries in {len(read)} buckets")
    assert [info.name for info in big.items] == sorted(names, key=listing_order)[:1000]
    assert sum(read) <= 2 * 1000
    backend.close()
    client.close()


# -- Cluster ------------------------------------------------------------------------------
@pytest.mark.cluster
def test_listings_and_force_release_on_a_3_master_cluster(cluster_backend: Backend) -> None:
    names = random_names(350, seed=7)
    lock_names, sem_names = names[:300], names[300:]
    masters = {
        cluster_backend.client.get_node_from_key(cluster_backend.keys.lock(name).lock).name
        for name in names
    }
    assert len(masters) == 3, "the names did not spread over the masters"
    locks = [Lock(name, client=cluster_backend, timeout=60) for name in lock_names]
    semaphores = [Semaphore(name, 2, client=cluster_backend, timeout=60) for name in sem_names]
    primitives: list[Lock | Semaphore] = [*locks, *semaphores]
    for primitive in primitives:
        assert primitive.acquire()

    listed_locks = every_item(list_locks, count=37, client=cluster_backend)
    assert [info.name for info in listed_locks] == sorted(lock_names, key=listing_order)
    assert {info.name: info.holder_id for info in listed_locks} == {
        lock.name: lock.holder_id for lock in locks
    }
    listed_sems = every_item(list_semaphores, count=7, client=cluster_backend)
    assert [info.name for info in listed_sems] == sorted(sem_names, key=listing_order)
    assert all((info.limit, info.count, info.waiting) == (2, 1, 0) for info in listed_sems)

    victim, sem_victim = locks[0], semaphores[0]
    assert victim.holder_id is not None and sem_victim.holder_id is not None
    assert force_release(victim.name, victim.holder_id, client=cluster_backend)
    assert force_release(
        sem_victim.name, sem_victim.holder_id, kind="semaphore", client=cluster_backend
    )
    with pytest.raises(LockLost):
        victim.ensure_held()
    with pytest.raises(LockLost):
        sem_victim.refresh()
    assert {i.name for i in every_item(list_locks, count=100, client=cluster_backend)} == set(
        lock_names[1:]
    )
    assert {i.name for i in every_item(list_semaphores, count=100, client=cluster_backend)} == set(
        sem_names[1:]
    )
    for primitive in primitives:
        if primitive not in (victim, sem_victim):
            primitive.release()
    assert list_locks(client=cluster_backend).items == []
    assert list_semaphores(client=cluster_backend).items == []


# -- force_release ------------------------------------------------------------------------
@pytest.mark.parametrize("operation", ["ensure_held", "extend", "release"])
def test_force_release_evicts_the_listed_lock_hold_and_the_holder_finds_out(
    backend: Backend, redis_client: redis.Redis, operation: str
) -> None:
    lock = Lock("charge:7", client=backend, timeout=30, metadata={"label": LABEL})
    assert lock.acquire()
    fence = lock.fence
    [shown] = list_locks(client=backend).items
    assert shown.holder_id == lock.holder_id and shown.label == LABEL
    key = backend.keys.lock("charge:7").lock
    assert force_release("charge:7", shown.holder_id, client=backend) is True
    assert not is_held(redis_client, key)
    before = redis_client.hgetall(key)
    assert list_locks(client=backend).items == []
    assert force_release("charge:7", shown.holder_id, client=backend) is False  # gone already
    actions: dict[str, Callable[[], object]] = {
        "ensure_held": lock.ensure_held,
        "extend": lambda: lock.extend(10),
        "release": lock.release,
    }
    with pytest.raises(LockLost):
        actions[operation]()
    assert redis_client.hgetall(key) == before  # the evicted holder wrote nothing back
    assert current_holder_id(lock) is None  # and forgot its hold
    successor = Lock("charge:7", client=backend, timeout=30, blocking=False)
    assert successor.acquire()
    assert fence is not None and successor.fence is not None and successor.fence > fence
    successor.release()


@pytest.mark.parametrize("operation", ["ensure_held", "refresh", "release"])
def test_force_release_evicts_one_of_three_semaphore_holders_and_leaves_the_other_two(
    backend: Backend, operation: str
) -> None:
    holders = [
        Semaphore("pool", 3, client=backend, timeout=30, metadata={"label": f"worker-{i}"})
        for i in range(3)
    ]
    for semaphore in holders:
        assert semaphore.acquire()
    [info] = list_semaphores(client=backend).items
    assert info.count == 3
    [shown] = [h for h in info.holders if h.label == "worker-1"]
    victim = holders[1]
    assert shown.holder_id == victim.holder_id
    assert force_release("pool", shown.holder_id, kind="semaphore", client=backend) is True
    after = get_semaphore("pool", client=backend)
    assert after is not None and after.count == 2 and after.limit == 3
    assert {h.holder_id for h in after.holders} == {holders[0].holder_id, holders[2].holder_id}
    assert force_release("pool", shown.holder_id, kind="semaphore", client=backend) is False
    actions: dict[str, Callable[[], object]] = {
        "ensure_held": victim.ensure_held,
        "refresh": victim.refresh,
        "release": victim.release,
    }
    with pytest.raises(LockLost):
        actions[operation]()
    assert current_holder_id(victim) is None
    assert victim.count() == 2
    for survivor in (holders[0], holders[2]):
        assert survivor.refresh() == 30
        assert survivor.ensure_held() > 0
        survivor.release()
    assert get_semaphore("pool", client=backend) is None


def test_force_release_with_a_stale_holder_id_leaves_the_new_lock_holder_alone(
    backend: Backend, redis_client: redis.Redis
) -> None:
    first = Lock("nightly", client=backend, timeout=30)
    assert first.acquire()
    shown = get_lock("nightly", client=backend)
    assert shown is not None
    first.release()
    second = Lock("nightly", client=backend, timeout=30)
    assert second.acquire()
    key = backend.keys.lock("nightly").lock
    before = redis_client.hgetall(key)
    assert force_release("nightly", shown.holder_id, client=backend) is False
    assert redis_client.hgetall(key) == before
    assert second.owned() and second.ensure_held() > 29
    current = get_lock("nightly", client=backend)
    assert current is not None and current.holder_id == second.holder_id
    assert force_release("never-held", shown.holder_id, client=backend) is False
    second.release()


def contents(client: redis.Redis, key: str) -> object:
    """What a key holds (not how Redis encodes it)."""
    kind = client.type(key)
    if kind == b"hash":
        return client.hgetall(key)
    if kind == b"zset":
        return client.zrange(key, 0, -1, withscores=True)
    return client.get(key) if kind == b"string" else None


def test_force_release_with_a_stale_holder_id_leaves_the_new_semaphore_holder_alone(
    backend: Backend, redis_client: redis.Redis
) -> None:
    first = Semaphore("single", 1, client=backend, timeout=30)
    assert first.acquire()
    shown = get_semaphore("single", client=backend)
    assert shown is not None
    stale_id = shown.holders[0].holder_id
    first.release()
    second = Semaphore("single", 1, client=backend, timeout=30)
    assert second.acquire()
    state = backend.keys.semaphore("single").state
    before = {key: contents(redis_client, key) for key in state}
    assert force_release("single", stale_id, kind="semaphore", client=backend) is False
    assert {key: contents(redis_client, key) for key in state} == before
    assert second.held() and second.refresh() == 30
    current = get_semaphore("single", client=backend)
    assert current is not None and [h.holder_id for h in current.holders] == [second.holder_id]
    second.release()


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_auto_renewed_evicted_holder_hears_of_it_within_one_renewal_interval(
    backend: Backend, kind: Kind
) -> None:
    timeout = 1.5
    lost = threading.Event()
    reasons: list[str] = []

    def on_lost(primitive: object, reason: str) -> None:
        reasons.append(reason)
        lost.set()

    primitive: Lock | Semaphore
    if kind == "lock":
        primitive = Lock("sync", client=backend, timeout=timeout, auto_renew=True, on_lost=on_lost)
    else:
        primitive = Semaphore(
            "sync", 2, client=backend, timeout=timeout, auto_renew=True, on_lost=on_lost
        )
    assert primitive.acquire()
    holder_id = primitive.holder_id
    assert holder_id is not None
    assert force_release("sync", holder_id, kind=kind, client=backend)
    evicted_at = time.monotonic()
    assert lost.wait(timeout / 3 + 0.3), "on_lost did not fire within one renewal interval"
    assert time.monotonic() - evicted_at <= timeout / 3 + 0.3
    assert len(reasons) == 1
    with pytest.raises(LockLost):
        primitive.ensure_held()
    assert get_lock("sync", client=backend) is None
    assert get_semaphore("sync", client=backend) is None


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_waiter_blocked_on_a_force_released_hold_takes_it_promptly(
    backend: Backend, kind: Kind
) -> None:
    """Woken by the forced release, well before the waiter's own re-check would come."""
    primitives: list[Lock | Semaphore]
    if kind == "lock":
        primitives = [Lock("busy", client=backend, timeout=30) for _ in "ab"]
    else:
        primitives = [Semaphore("busy", 1, client=backend, timeout=30) for _ in "ab"]
    holder, waiter = primitives
    recheck = type(waiter).recheck_seconds
    assert holder.acquire()
    got: dict[str, Any] = {}

    def wait_for_it() -> None:
        got["acquired"] = waiter.acquire(timeout=10)
        got["at"] = time.monotonic()
        got["holder_id"] = waiter.holder_id
        if got["acquired"]:
            waiter.release()

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    member = waiter._keys_for(backend).member
    wait_until(
        lambda: any(m.split("#")[0] == member for m in list(backend.hub()._waiters)),
        timeout=5,
        what="the waiter to listen for wake-ups",
    )
    holder_id = holder.holder_id
    assert holder_id is not None
    released_at = time.monotonic()
    assert force_release("busy", holder_id, kind=kind, client=backend)
    thread.join(10)
    assert not thread.is_alive() and got["acquired"] is True
    latency = got["at"] - released_at
    assert latency < recheck / 3, f"took {latency:.3f} s; re-check interval is {recheck} s"
    assert got["holder_id"] != holder_id
    with pytest.raises(LockLost):
        holder.ensure_held()


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_force_release_reaches_an_auto_renewed_holder_in_another_process(
    redis_server: Any, backend: Backend, kind: Kind
) -> None:
    timeout = 1.5
    worker = subprocess.Popen(
        [
            *(sys.executable, "-m", "tests.core.workers", "hold-renewed"),
            *(redis_server.url, backend.keys.namespace, "nightly-export", kind, str(timeout)),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    lines: queue.Queue[dict[str, Any]] = queue.Queue()

    def read() -> None:
        assert worker.stdout is not None
        for line in worker.stdout:
            lines.put(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        held = lines.get(timeout=30)
        assert held["pid"] == worker.pid
        shown: HolderInfo | None
        if kind == "lock":
            shown = get_lock("nightly-export", client=backend)
        else:
            info = get_semaphore("nightly-export", client=backend)
            shown = info.holders[0] if info is not None else None
        assert shown is not None
        assert shown.holder_id == held["holder_id"]
        assert shown.pid == worker.pid and shown.host == socket.gethostname()
        assert force_release("nightly-export", shown.holder_id, kind=kind, client=backend)
        evicted_at = time.monotonic()
        lost = lines.get(timeout=timeout / 3 + 1.0)
        noticed = time.monotonic() - evicted_at
        assert "lost" in lost
        assert noticed <= timeout / 3 + 0.3, f"the worker heard after {noticed:.3f} s"
        assert lines.get(timeout=5) == {"ensure_held": "LockLost"}
        assert worker.wait(timeout=10) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        reader.join(5)  # ends at end of file, once the worker is gone
        assert worker.stdout is not None
        worker.stdout.close()
    assert get_lock("nightly-export", client=backend) is None
    assert get_semaphore("nightly-export", client=backend) is None


# -- secrecy ------------------------------------------------------------------------------
def test_tokens_never_appear_in_listings(backend: Backend) -> None:
    lock = Lock("secret", client=backend, timeout=30, metadata={"label": LABEL})
    semaphores = [Semaphore("secret", 2, client=backend, timeout=30) for _ in "ab"]
    primitives: list[Lock | Semaphore] = [lock, *semaphores]
    for primitive in primitives:
        assert primitive.acquire()
    tokens = [token_of(primitive) for primitive in primitives]
    for primitive, token in zip(primitives, tokens, strict=True):
        expected = hashlib.sha1(token.encode(), usedforsecurity=False).hexdigest()[:16]
        assert primitive.holder_id == expected  # the id is derived from the token, one way
    shown: list[HolderInfo | SemaphoreInfo | None] = [
        *list_locks(client=backend).items,
        get_lock("secret", client=backend),
        *list_semaphores(client=backend).items,
        get_semaphore("secret", client=backend),
        *semaphores[0].holders(),
    ]
    records = [info for info in shown if info is not None]
    records += [h for info in records if isinstance(info, SemaphoreInfo) for h in info.holders]
    assert len(records) == 10  # 2 lock records, 2 semaphore records, 6 semaphore holders
    for record in records:
        texts = [repr(record), str(record), json.dumps(dataclasses.asdict(record), default=str)]
        texts += [repr(getattr(record, field.name)) for field in dataclasses.fields(record)]
        for token in tokens:
            assert all(token not in text for text in texts), f"a token shows in {record!r}"
    for primitive in primitives:
        primitive.release()

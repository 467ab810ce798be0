"""Scenario 5: the client's connections killed by the server (``CLIENT KILL``) mid-hold.

Pass rule: auto-renewed holds are kept, the renewals after each kill succeed (on a new
connection) within a renewal interval, and ``on_lost`` never fires; an asyncio holder goes on
working too; after its pub/sub connection is killed, the wake-up listener subscribes again
and a blocked waiter is still woken by the release (within milliseconds, not by its 1 s
re-check).
"""

from __future__ import annotations

import asyncio
import functools
import random
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest
import redis

from django_redis_locks.core import Backend, Lock, Semaphore
from tests.harness.servers import hub_has_waiter, wait_until

pytestmark = pytest.mark.chaos

TTL = 1.0
SOCKET_TIMEOUT = 0.5
KILLS = 6


@pytest.fixture
def server(make_server: Any) -> Any:
    return make_server()


@pytest.fixture
def admin(server: Any) -> Iterator[redis.Redis]:
    with server.client(socket_timeout=5, decode_responses=True) as client:
        yield client


@pytest.fixture
def backend(server: Any) -> Iterator[Backend]:
    client = server.client(socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT)
    backend = Backend(client, namespace="killed")
    yield backend
    backend.close()
    client.close()


def test_auto_renewed_holds_are_kept_when_their_connections_are_killed(
    backend: Backend, admin: redis.Redis, figures: dict[str, Any], rng: random.Random
) -> None:
    lost: list[str] = []
    lock = Lock(
        "kept", client=backend, timeout=TTL, auto_renew=True, on_lost=lambda _, r: lost.append(r)
    )
    semaphore = Semaphore(
        "kept", 2, client=backend, timeout=TTL, auto_renew=True, on_lost=lambda _, r: lost.append(r)
    )
    assert lock.acquire() and semaphore.acquire()
    lock_key = lock._keys_for(backend).lock
    holders_key = semaphore._keys_for(backend).holders

    def expiries() -> tuple[int, int]:
        lock_expiry = int(admin.hget(lock_key, "expires") or 0)
        slots = cast(list[tuple[str, float]], admin.zrange(holders_key, 0, -1, withscores=True))
        return lock_expiry, int(max((float(score) for _, score in slots), default=0))

    def renewed_since(before: tuple[int, int]) -> bool:
        return all(a > b for a, b in zip(expiries(), before, strict=True))

    killed: list[int] = []
    renewed_after: list[float] = []
    for _ in range(KILLS):
        time.sleep(rng.uniform(0, TTL / 3))  # kill at a random point of the renewal cycle
        before = expiries()
        killed.append(int(admin.client_kill_filter(_type="normal")))  # all but this one
        killed_at = time.monotonic()
        wait_until(
            functools.partial(renewed_since, before),
            timeout=TTL,
            what="both holds renewed after the kill",
        )
        renewed_after.append(time.monotonic() - killed_at)
    lock_left, slot_left = lock.ensure_held(), semaphore.ensure_held()
    lock.release()
    semaphore.release()
    figures.update(
        ttl_s=TTL,
        connections_killed=killed,
        renewed_after_the_kill_s=[round(r, 3) for r in renewed_after],
        lost=lost,
    )
    assert all(k >= 1 for k in killed)
    assert not lost
    assert max(renewed_after) <= TTL / 3 + 0.3  # the next renewal, on a new connection
    assert lock_left > 0 and slot_left > 0


def test_an_asyncio_holder_goes_on_after_its_connection_is_killed(
    server: Any, admin: redis.Redis, figures: dict[str, Any]
) -> None:
    async def scenario() -> dict[str, Any]:
        client = redis.asyncio.Redis(
            host=server.host,
            port=server.port,
            socket_timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=SOCKET_TIMEOUT,
        )
        backend = Backend(client, namespace="killed-async")
        lock = Lock("kept-async", client=backend, timeout=10)
        await lock.aacquire()
        fence = lock.fence
        killed = admin.client_kill_filter(_type="normal")
        left = await lock.aensure_held()
        extended = await lock.aextend(5)
        await lock.arelease()
        free = not await lock.alocked()
        await backend.aclose()
        backend.close()
        await client.aclose()
        return {"killed": killed, "left": left, "extended": extended, "fence": fence, "free": free}

    outcome = asyncio.run(scenario())
    figures.update(connections_killed=outcome["killed"])
    assert outcome["killed"] >= 1
    assert outcome["left"] > 0 and outcome["extended"] > 5 and outcome["free"]


def test_the_wakeup_listener_reconnects_and_a_waiter_is_still_woken(
    backend: Backend, admin: redis.Redis, figures: dict[str, Any]
) -> None:
    holder = Lock("wake", client=backend, timeout=10)
    waiter = Lock("wake", client=backend, timeout=10)
    member = holder._keys_for(backend).member
    channel = backend.hub().channel  # this process's wake-up channel
    latencies: list[float] = []
    for _ in range(5):
        assert holder.acquire()
        acquired_at: list[float] = []

        def wait_for_it(acquired_at: list[float] = acquired_at) -> None:
            assert waiter.acquire(timeout=20)
            acquired_at.append(time.monotonic())
            waiter.release()

        thread = threading.Thread(target=wait_for_it)
        thread.start()
        wait_until(lambda: hub_has_waiter(backend, member), timeout=5, what="a waiter")
        before = {c["id"] for c in admin.client_list(_type="pubsub")}
        assert before and admin.client_kill_filter(_type="pubsub") >= 1

        def resubscribed(before: set[str] = before) -> bool:
            now = {c["id"] for c in admin.client_list(_type="pubsub")}
            subscribers = dict(admin.pubsub_numsub(channel)).get(channel)
            return backend.hub().ready and subscribers == 1 and not before & now

        wait_until(
            resubscribed,
            timeout=5,
            what="the listener subscribed again on a new connection",
        )
        released_at = time.monotonic()
        holder.release()
        thread.join(timeout=20)
        assert acquired_at, "the waiter did not get the lock"
        latencies.append(acquired_at[0] - released_at)
    figures.update(wakeup_after_release_s=[round(lat, 4) for lat in latencies])
    # A waiter that was not woken would find out at its 1 s re-check.
    assert statistics.median(latencies) < 0.05
    assert max(latencies) < Lock.recheck_seconds

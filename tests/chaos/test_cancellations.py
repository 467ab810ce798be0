"""Scenario 9: 400 random cancellations of asyncio acquires and releases.

Batches of tasks take locks and semaphore slots (blocking with a timeout, ``async with``,
non-blocking tries; some auto-renewed), hold them for a few milliseconds and give them back;
more than half of them are cancelled after a random delay, which lands anywhere: in an
acquire's script call, its queue wait or its wake-up registration, in the work, in a release.

Pass rule. Right after the storm (once the clean-ups that cancellations started have run):
no queue or waiter entry is left; every hold still live in Redis is one the library knows of
(a task whose release was cancelled keeps its hold until the TTL, as documented), so there is
no phantom hold; the wake-up hub has no waiter. Within 3x the TTL after it, the namespace
holds no key but the lock hashes, whose fence records outlive their holds (each with no live
hold), the semaphores' records of their recent releases, and the registry's two sorted sets,
whose entries (kept lazily) outlive their names' keys by no more than the footprint's bound
(listings are empty);
no lock queue, lock waiter or semaphore key at all; the renewer has no hold of this test.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from typing import Any

import pytest
import redis

from django_redis_locks.core import Backend, Lock, LockNotAcquired, Semaphore
from django_redis_locks.core.protocol.constants import HOT_LONG_MS, REGISTRY_AHEAD_MS, RETENTION_MS
from django_redis_locks.core.protocol.replies import text
from django_redis_locks.core.runtime import driver
from django_redis_locks.core.runtime.renewal import renewer
from django_redis_locks.inspection import list_locks, list_semaphores
from tests.harness.servers import HarnessError, wait_until
from tests.helpers import only_recent_releases, server_ms

pytestmark = pytest.mark.chaos

TTL = 1.0
CANCELLATIONS = 400
BATCH = 40
CANCEL_SHARE = 0.6  # of the tasks of a batch get a cancellation scheduled
PATTERNS = ("with", "timeout", "try")

Primitive = Lock | Semaphore


def leftovers(client: redis.Redis, namespace: str) -> list[str]:
    """Keys of the namespace that should not be there (see the module docstring)."""
    now = server_ms(client)
    wrong = []
    for raw in client.scan_iter(match=f"{namespace}:*", count=1000):
        key = raw.decode()
        kind = key.split(":")[2]
        if kind == "lock":
            token, expires = client.hmget(key, "token", "expires")
            if token is not None and int(expires or 0) > now:
                wrong.append(f"{key} (live hold)")
        elif kind == "reg":
            # Entries are kept lazily (lib/registry.lua): a released name's entry stays a
            # while, never past the footprint's bound.
            bound = now + RETENTION_MS + 2 * REGISTRY_AHEAD_MS
            if key.endswith(":expiry") and client.zcount(key, bound + 1, "+inf"):
                wrong.append(f"{key} (an entry kept too long)")
        elif kind == "hot":
            # The contention figures (lib/hot) stay by design, at most two hours.
            if not 0 < client.pttl(key) <= 2 * HOT_LONG_MS:
                wrong.append(f"{key} (contention figures kept too long)")
        elif kind == "semi" and only_recent_releases(client, key):
            continue  # what a released semaphore keeps a while: its recent releases
        else:
            wrong.append(key)
    return wrong


def live_tokens(client: redis.Redis, primitive: Primitive, backend: Backend) -> set[str]:
    """The tokens holding ``primitive`` in Redis right now."""
    now = server_ms(client)
    if isinstance(primitive, Lock):
        key = primitive._keys_for(backend).lock
        token, expires = client.hmget(key, "token", "expires")
        return {text(token)} if token is not None and int(expires or 0) > now else set()
    holders = primitive._keys_for(backend).holders
    return {text(t) for t in client.zrangebyscore(holders, now + 1, "+inf")}


def queue_keys(primitive: Primitive, backend: Backend) -> tuple[str, ...]:
    if isinstance(primitive, Lock):
        keys = primitive._keys_for(backend)
        return (keys.queue, keys.waiters)
    sem_keys = primitive._keys_for(backend)
    return (sem_keys.queue, sem_keys.leases)


@pytest.mark.timeout(180)
def test_400_random_cancellations_leave_no_waiter_queue_or_phantom_hold_behind(
    redis_server: Any,
    redis_client: redis.Redis,
    namespace: str,
    figures: dict[str, Any],
    rng: random.Random,
) -> None:
    phases: Counter[str] = Counter()
    endings: Counter[str] = Counter()
    errors: list[str] = []

    async def user(primitive: Primitive, pattern: str, work: float, state: dict[str, str]) -> None:
        state["phase"] = "acquire"
        if pattern == "with":
            try:
                async with primitive:
                    state["phase"] = "hold"
                    await asyncio.sleep(work)  # the work done while holding
                    state["phase"] = "release"
            except LockNotAcquired:
                pass
        else:
            if pattern == "timeout":
                acquired = await primitive.aacquire(timeout=rng.uniform(0, 0.05))
            else:
                acquired = await primitive.aacquire(blocking=False)
            if acquired:
                state["phase"] = "hold"
                try:
                    await asyncio.sleep(work)  # the work done while holding
                finally:
                    state["phase"] = "release"
                    await primitive.arelease()
        state["phase"] = "done"

    async def cancel_later(task: asyncio.Task[None], state: dict[str, str], delay: float) -> None:
        await asyncio.sleep(delay)  # the random point at which the task is cancelled
        if task.done() or sum(phases.values()) >= CANCELLATIONS:
            return
        phases[state["phase"]] += 1
        task.cancel()

    async def storm() -> dict[str, Any]:
        client = redis.asyncio.Redis.from_url(redis_server.url, socket_timeout=5)
        backend = Backend(client, namespace=namespace)
        primitives: list[Primitive] = [
            Lock(f"lock-{i}", client=backend, timeout=TTL, blocking_timeout=2, auto_renew=i == 0)
            for i in range(3)
        ]
        primitives += [
            Semaphore(
                f"sem-{i}", 2, client=backend, timeout=TTL, blocking_timeout=2, auto_renew=i == 0
            )
            for i in range(2)
        ]
        kept: list[asyncio.Task[None]] = []  # referenced, so their holds stay visible
        started = time.monotonic()
        while sum(phases.values()) < CANCELLATIONS:
            batch = []
            cancels = []
            for _ in range(BATCH):
                state = {"phase": "start"}
                coroutine = user(
                    rng.choice(primitives), rng.choice(PATTERNS), rng.uniform(0, 0.01), state
                )
                task = asyncio.create_task(coroutine)
                batch.append(task)
                if rng.random() < CANCEL_SHARE:
                    cancels.append(cancel_later(task, state, rng.uniform(0, 0.03)))
            await asyncio.gather(*cancels)
            for result in await asyncio.gather(*batch, return_exceptions=True):
                if isinstance(result, asyncio.CancelledError):
                    endings["cancelled"] += 1
                elif isinstance(result, BaseException):
                    errors.append(repr(result))
                else:
                    endings["completed"] += 1
            kept += batch
        # Clean-ups that cancellations started run on in shielded tasks: let them finish.
        background = list(driver._background)
        await asyncio.gather(*background, return_exceptions=True)
        storm_seconds = time.monotonic() - started

        known = set()
        for primitive in primitives:
            known |= {hold.token for hold in primitive._holds.holds()}
        live = set()
        queued = []
        for primitive in primitives:
            live |= live_tokens(redis_client, primitive, backend)
            queued += [k for k in queue_keys(primitive, backend) if redis_client.exists(k)]
        outcome = {
            "storm_s": round(storm_seconds, 2),
            "detached_clean_ups_awaited": len(background),
            "live_holds_after_the_storm": len(live),
            "phantom_holds": len(live - known),
            "queue_keys_after_the_storm": queued,
            "hub_waiters_after_the_storm": len(backend.hub()._waiters),
            "backend": backend,
        }
        await backend.aclose()
        await client.aclose()
        del kept
        return outcome

    outcome = asyncio.run(storm())
    backend: Backend = outcome.pop("backend")
    ended_at = time.monotonic()

    def clean() -> bool:
        return not leftovers(redis_client, namespace) and not renewer().renewing(backend)

    with contextlib.suppress(HarnessError):  # the assertions below say what is left
        wait_until(clean, timeout=3 * TTL, what="the namespace to be clean")
    clean_after = time.monotonic() - ended_at
    left = leftovers(redis_client, namespace)
    renewed = renewer().renewing(backend)
    listed = list_locks(client=backend).items + list_semaphores(client=backend).items
    figures.update(
        ttl_s=TTL,
        cancellations=sum(phases.values()),
        cancelled_while=dict(phases),
        tasks=dict(endings),
        errors=errors[:5],
        clean_after_s=round(clean_after, 3),
        keys_left=left,
        renewer_running=renewer().running,
        **outcome,
    )
    backend.close()
    assert sum(phases.values()) == CANCELLATIONS
    assert not errors, errors[:5]
    assert outcome["phantom_holds"] == 0, "a hold nobody knows of is left in Redis"
    assert outcome["queue_keys_after_the_storm"] == [], "a waiter's place was left behind"
    assert outcome["hub_waiters_after_the_storm"] == 0
    assert left == [], left
    assert not listed
    assert not renewed, "the renewer still has holds of this test"
    assert not backend.hub()._waiters

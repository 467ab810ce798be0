"""Who owns a hold: the task that called ``aacquire()`` (also through asyncio wrappers), a
greenlet, a thread; and a hold whose TTL ran out is no hold."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import greenlet
import pytest
import redis

from django_redis_locks import Lock, LockAlreadyHeld, LockNotOwned, Semaphore
from django_redis_locks.core import Backend
from django_redis_locks.core.runtime.ownership import current_owner, owner_alive, owner_kind
from django_redis_locks.core.runtime.renewal import renewer
from tests.harness.servers import wait_until

# How each asyncio wrapper runs the coroutine that aacquire() returned: in a task of its own
# (wait_for on Python 3.11, gather, shield), or (create_task) in a task the caller made.
WRAPPERS: dict[str, Callable[[Awaitable[bool]], Awaitable[Any]]] = {
    "wait_for": lambda aw: asyncio.wait_for(aw, 5),
    "gather": asyncio.gather,
    "shield": asyncio.shield,
    "create_task": asyncio.create_task,  # type: ignore[dict-item]
}


def run_with(redis_server: Any, namespace: str, scenario: Any) -> Any:
    async def main() -> Any:
        client = redis.asyncio.Redis.from_url(redis_server.url, socket_timeout=5)
        backend = Backend(client, namespace=namespace)
        try:
            return await scenario(backend)
        finally:
            await client.aclose()
            backend.close()

    return asyncio.run(main())


def primitive_of(kind: str, backend: Backend, **options: Any) -> Lock | Semaphore:
    if kind == "lock":
        return Lock("wrapped", client=backend, **options)
    return Semaphore("wrapped", 1, client=backend, **options)


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_the_task_that_calls_aacquire_owns_the_hold_whatever_wraps_it(
    redis_server: Any, namespace: str, kind: str, wrapper: str
) -> None:
    async def scenario(backend: Backend) -> dict[str, Any]:
        primitive = primitive_of(kind, backend, timeout=0.6, auto_renew=True)
        other = primitive_of(kind, backend, timeout=0.6, blocking=False)
        assert await WRAPPERS[wrapper](primitive.aacquire())
        hold = primitive._current_hold()
        outcome = {"owned_here": hold is not None}
        await asyncio.sleep(1.5)  # 2.5 TTLs: renewed only while its owner (this task) lives
        outcome["still_held"] = not await other.aacquire()
        outcome["renewed"] = hold is not None and hold in renewer()
        await primitive.arelease()  # by the caller: LockNotOwned before the fix
        outcome["free_after_release"] = await other.aacquire()
        await other.arelease()
        return outcome

    outcome = run_with(redis_server, namespace, scenario)
    assert outcome == {
        "owned_here": True,
        "still_held": True,
        "renewed": True,
        "free_after_release": True,
    }


def test_every_a_method_belongs_to_its_caller(redis_server: Any, namespace: str) -> None:
    async def scenario(backend: Backend) -> None:
        lock = Lock("calls", client=backend, timeout=5)
        assert await asyncio.wait_for(lock.aacquire(), 5)
        assert await asyncio.wait_for(lock.aowned(), 5)
        assert 0 < await asyncio.wait_for(lock.aensure_held(), 5) <= 5
        assert await asyncio.wait_for(lock.aextend(3, replace=True), 5) == 3
        await asyncio.wait_for(lock.arelease(), 5)
        assert not await lock.alocked()
        semaphore = Semaphore("calls", 1, client=backend, timeout=5)
        assert await asyncio.wait_for(semaphore.aacquire(), 5)
        assert await asyncio.gather(semaphore.aheld(), semaphore.arefresh()) == [True, 5.0]
        await asyncio.shield(semaphore.arelease())
        assert await semaphore.acount() == 0

    run_with(redis_server, namespace, scenario)


def test_a_coroutine_made_outside_a_task_belongs_to_the_task_that_runs_it(
    redis_server: Any, namespace: str
) -> None:
    with redis.Redis.from_url(redis_server.url, socket_timeout=5) as client:
        backend = Backend(client, namespace=namespace)
        lock = Lock("outside", client=backend, timeout=5)
        acquiring = lock.aacquire()  # no event loop runs here: bound when it runs

        async def main() -> bool:
            assert await acquiring
            owned = await lock.aowned()
            await lock.arelease()
            await backend.aclose()
            return owned

        assert asyncio.run(main()) is True
        assert not lock.locked()
        backend.close()


def test_a_task_that_did_not_call_aacquire_cannot_release(
    redis_server: Any, namespace: str
) -> None:
    async def scenario(backend: Backend) -> None:
        lock = Lock("mine", client=backend, timeout=5)
        assert await lock.aacquire()

        async def stranger() -> None:
            await lock.arelease()

        with pytest.raises(LockNotOwned, match="not held by this task"):
            await asyncio.create_task(stranger())
        await lock.arelease()

    run_with(redis_server, namespace, scenario)


def test_greenlets_own_their_holds_apart(backend: Backend) -> None:
    """Two greenlets of one thread (no gevent needed) each hold apart, and one's hold is
    renewed while it lives and dropped when it is dead."""
    lock = Lock("green", client=backend, timeout=0.6, auto_renew=True, blocking=False)
    results: dict[str, Any] = {}

    def first() -> None:
        results["first"] = lock.acquire()
        results["first_owner"] = owner_kind(current_owner())
        main.switch()  # back to the main greenlet, holding the lock
        lock.release()

    def second() -> None:
        results["second"] = lock.acquire()  # another greenlet: not its hold, and taken
        with pytest.raises(LockNotOwned):
            lock.release()

    main = greenlet.getcurrent()
    holder = greenlet.greenlet(first)
    holder.switch()
    greenlet.greenlet(second).switch()
    time.sleep(1.5)  # the holder greenlet is suspended, not dead: its hold is renewed
    assert lock.locked()
    holder.switch()  # it releases
    assert results == {"first": True, "first_owner": "greenlet", "second": False}
    assert not lock.locked()
    assert not owner_alive(holder)


# -- item 3: an expired hold is no hold ------------------------------------------------------
@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_hold_that_ran_out_is_no_hold_the_same_object_acquires_again(
    backend: Backend, kind: str
) -> None:
    """The "acquire, never release, let it expire" throttle on a long-lived object."""
    primitive = primitive_of(kind, backend, timeout=0.2, blocking=False)
    other = primitive_of(kind, backend, timeout=5, blocking=False)
    fences = []
    for _ in range(3):
        assert primitive.acquire()
        fences.append(primitive.holder_id)
        wait_until(other.acquire, timeout=3, what="the hold to run out")
        other.release()
    assert len(set(fences)) == 3  # a new hold each time
    assert primitive.acquire() is True
    with pytest.raises(LockAlreadyHeld):  # still not re-entrant while it is alive
        primitive.acquire()
    primitive.release()


def test_an_expired_hold_is_no_hold_in_asyncio_either(redis_server: Any, namespace: str) -> None:
    async def scenario(backend: Backend) -> list[bool]:
        lock = Lock("athrottle", client=backend, timeout=0.2, blocking=False)
        taken = []
        for _ in range(3):
            taken.append(await lock.aacquire())
            await asyncio.sleep(0.4)
        return taken

    assert run_with(redis_server, namespace, scenario) == [True, True, True]


def test_a_renewed_hold_found_gone_at_the_next_acquire_is_reported_lost(
    backend: Backend, redis_client: redis.Redis
) -> None:
    lost: list[str] = []
    lock = Lock(
        "renewed-gone",
        client=backend,
        timeout=30,
        auto_renew=True,
        blocking=False,
        on_lost=lambda lock, reason: lost.append(reason),
    )
    assert lock.acquire()
    redis_client.delete(lock._keys_for(backend).lock)
    assert lock.acquire()  # the old hold is gone: this is a new one
    assert lost == ["it expired or was removed"]
    lock.release()

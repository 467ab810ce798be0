"""The asyncio API: same surface as the sync one, task-scoped tokens, cancellation."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
import textwrap

import pytest
import redis
from asgiref.sync import iscoroutinefunction

from django_redis_locks import Lock, LockLost, LockNotAcquired, LockNotOwned
from django_redis_locks.core import Backend
from tests.harness.servers import hub_has_waiter

SYNC_TWINS = ["acquire", "release", "extend", "locked", "owned", "ensure_held"]


def test_every_sync_method_has_an_async_twin_with_the_same_signature() -> None:
    # asgiref's check (Django's): it also knows functions marked as coroutine functions,
    # which the a-methods that bind their caller are (inspect knows the mark from 3.12 on).
    public = {name for name in dir(Lock) if not name.startswith("_")}
    coroutines = {n for n in public if iscoroutinefunction(getattr(Lock, n))}
    assert coroutines == {f"a{name}" for name in SYNC_TWINS}
    for name in SYNC_TWINS:
        sync, twin = (
            inspect.signature(getattr(Lock, name)),
            inspect.signature(getattr(Lock, f"a{name}")),
        )
        assert sync.parameters == twin.parameters, name
        assert sync.return_annotation == twin.return_annotation, name
    assert inspect.iscoroutinefunction(Lock.__aenter__) and inspect.iscoroutinefunction(
        Lock.__aexit__
    )


@pytest.fixture
def aclient(redis_server):
    return lambda: redis.asyncio.Redis.from_url(redis_server.url, socket_timeout=5)


def run(coro_factory, aclient, namespace):
    async def main():
        client = aclient()
        backend = Backend(client, namespace=namespace)
        try:
            return await coro_factory(backend, client)
        finally:
            await client.aclose()
            backend.close()

    return asyncio.run(main())


def test_two_tasks_sharing_one_lock_cannot_release_each_other(aclient, namespace) -> None:
    async def scenario(backend, client):
        lock = Lock("shared", client=backend, timeout=5, blocking=False)
        holder_ready, intruder_done = asyncio.Event(), asyncio.Event()
        outcome: dict[str, object] = {}

        async def holder():
            assert await lock.aacquire()
            holder_ready.set()
            await intruder_done.wait()
            outcome["holder_still_owns"] = await lock.aowned()
            await lock.arelease()

        async def intruder():
            await holder_ready.wait()
            outcome["intruder_acquired"] = await lock.aacquire()
            try:
                await lock.arelease()
                outcome["intruder_released"] = True
            except LockNotOwned:
                outcome["intruder_released"] = False
            outcome["intruder_owns"] = await lock.aowned()
            outcome["intruder_fence"] = lock.fence
            intruder_done.set()

        await asyncio.gather(holder(), intruder())
        return outcome

    outcome = run(scenario, aclient, namespace)
    assert outcome == {
        "intruder_acquired": False,
        "intruder_released": False,
        "intruder_owns": False,
        "intruder_fence": None,
        "holder_still_owns": True,
    }


def test_async_context_manager(aclient, namespace) -> None:
    async def scenario(backend, client):
        lock = Lock("actx", client=backend, timeout=5)
        busy = Lock("actx", client=backend, timeout=5, blocking=False)
        async with lock:
            assert await lock.alocked()
            with pytest.raises(LockNotAcquired):
                async with busy:
                    pass
            assert await lock.aextend(1, replace=True) == 1
            assert 0 < await lock.aensure_held() <= 1
        with pytest.raises(LockLost):
            async with lock:
                await client.delete(lock._keys_for(backend).lock)
        return await lock.alocked()

    assert run(scenario, aclient, namespace) is False


def test_blocking_acquire_can_be_cancelled(aclient, namespace) -> None:
    async def scenario(backend, client):
        holder = Lock("cancel", client=backend, timeout=5)
        assert await holder.aacquire()
        waiter = Lock("cancel", client=backend, timeout=5)
        task = asyncio.create_task(waiter.aacquire(timeout=30))
        member = holder._keys_for(backend).member
        async with asyncio.timeout(5):  # until the waiter is blocked on a wake-up
            while not hub_has_waiter(backend, member):
                await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not hub_has_waiter(backend, member), "the cancelled waiter is still registered"
        await holder.arelease()
        return await waiter.aacquire(blocking=False)

    assert run(scenario, aclient, namespace) is True


def test_core_imports_and_works_without_django(redis_server) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["django"] = None  # any "import django..." now fails
        import redis
        import django_redis_locks
        from django_redis_locks import Lock, LockError
        from django_redis_locks.core import Backend
        client = redis.Redis.from_url({redis_server.url!r}, socket_timeout=5)
        lock = Lock("no-django", client=Backend(client, namespace="nodjango"), timeout=5)
        with lock:
            assert lock.fence
        assert not [m for m in sys.modules if m.startswith("django.") or m == "django_redis"]
        try:
            Lock("needs-django").acquire()
        except LockError as exc:
            assert "client=" in str(exc), exc
        else:
            raise AssertionError("a lock without client worked without Django")
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_cancellation_mid_acquire_is_honoured_and_leaves_no_hold(aclient, namespace) -> None:
    """Cancel aacquire() at every point of a free-lock acquire: the task ends cancelled (also
    where redis-py's send swallows the cancellation on Python 3.11) or with the lock held, and
    a cancelled acquire never leaves a hold behind."""
    from django_redis_locks.core.runtime import driver

    async def scenario(backend, client):
        outcomes = {"cancelled": 0, "acquired": 0}
        for attempt in range(100):
            lock = Lock(f"cancel-{attempt}", client=backend, timeout=30)
            task = asyncio.create_task(lock.aacquire())
            for _ in range(attempt % 4):  # land the cancel at different points
                await asyncio.sleep(0)
            requested = task.cancel()  # False when the task had already finished
            try:
                await task
            except asyncio.CancelledError:
                outcomes["cancelled"] += 1
                async with asyncio.timeout(5):  # the background undo of a possible grant
                    while driver._background:
                        await asyncio.sleep(0.005)
                assert not await lock.alocked(), f"attempt {attempt} left a hold"
            else:
                assert not requested, f"attempt {attempt}: the cancellation was lost"
                outcomes["acquired"] += 1  # finished before the cancel: a normal hold
        return outcomes

    outcomes = run(scenario, aclient, namespace)
    assert outcomes["cancelled"] >= 50

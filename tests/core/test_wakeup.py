"""Blocked waiters are woken by a release (pub/sub), not by polling."""

from __future__ import annotations

import asyncio
import logging
import secrets
import statistics
import threading
import time

import pytest
import redis

from django_redis_locks import Lock, Semaphore
from django_redis_locks.core import Backend
from tests.harness.acl import CLIENT_COMMANDS, SCRIPT_COMMANDS, AclUser
from tests.harness.servers import hub_has_waiter, hub_listens_for, wait_until


def waiting(backend: Backend, lock: Lock) -> bool:
    """A waiter of ``lock``'s name is registered and its subscription confirmed."""
    return hub_listens_for(backend, lock._keys_for(backend).member)


def evalsha_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def test_waiter_wakes_within_milliseconds_of_release(backend: Backend) -> None:
    holder = Lock("handoff", client=backend, timeout=10)
    waiter_lock = Lock("handoff", client=backend, timeout=10)
    latencies: list[float] = []
    for _ in range(50):
        assert holder.acquire()
        acquired_at: list[float] = []

        def wait_for_it(acquired_at: list[float] = acquired_at) -> None:
            assert waiter_lock.acquire(timeout=10)
            acquired_at.append(time.perf_counter())
            waiter_lock.release()

        thread = threading.Thread(target=wait_for_it)
        thread.start()
        wait_until(lambda: waiting(backend, waiter_lock), timeout=5, what="waiter registered")
        released_at = time.perf_counter()
        holder.release()
        thread.join(timeout=10)
        latencies.append(acquired_at[0] - released_at)
    median = statistics.median(latencies)
    print(f"handoff median {median * 1000:.2f} ms, max {max(latencies) * 1000:.2f} ms")
    assert median < 0.020


def test_blocked_waiter_does_not_poll(make_server) -> None:
    server = make_server()
    client = server.client(socket_timeout=5)
    backend = Backend(client, namespace="nopoll")
    holder = Lock("quiet", client=backend, timeout=10)
    holder.acquire()
    result: list[bool] = []
    thread = threading.Thread(
        target=lambda: result.append(Lock("quiet", client=backend, timeout=10).acquire(timeout=5))
    )
    thread.start()
    wait_until(lambda: waiting(backend, holder), timeout=5, what="waiter registered")
    before = evalsha_calls(client)
    blocked_since = time.monotonic()
    # The waiter stays blocked for 0.6 s: a polling lock would issue one try per interval.
    wait_until(lambda: time.monotonic() - blocked_since > 0.6, timeout=5, what="0.6 s")
    during = evalsha_calls(client) - before
    holder.release()
    thread.join(timeout=10)
    assert result == [True]
    assert during <= 1, f"the waiter ran {during} scripts while blocked"
    client.close()


def test_async_waiter_is_woken_by_a_sync_release(redis_server, namespace: str) -> None:
    client = redis.Redis.from_url(redis_server.url, socket_timeout=5)
    backend = Backend(client, namespace=namespace)
    holder = Lock("mixed", client=backend, timeout=10)
    held = threading.Event()

    async def wait_for_it() -> float:
        lock = Lock("mixed", client=backend, timeout=10)
        assert await lock.aacquire(timeout=10)
        acquired = time.perf_counter()
        await lock.arelease()
        return acquired

    released: list[float] = []

    def release_when_waiting() -> None:
        holder.acquire()
        held.set()
        wait_until(lambda: waiting(backend, holder), timeout=5, what="async waiter registered")
        released.append(time.perf_counter())
        holder.release()

    thread = threading.Thread(target=release_when_waiting)
    thread.start()
    held.wait(timeout=10)
    acquired = asyncio.run(wait_for_it())
    thread.join()
    assert acquired - released[0] < 0.5
    client.close()


def test_waiter_takes_over_when_the_holder_expires(backend: Backend) -> None:
    """No release ever comes (a crashed holder): the waiter retries when the TTL runs out."""
    crashed = Lock("crashed", client=backend, timeout=0.3)
    crashed.acquire()
    started = time.monotonic()
    assert Lock("crashed", client=backend, timeout=5).acquire(timeout=5)
    assert time.monotonic() - started < 1.5


# -- failures of the listener are visible ----------------------------------------------------
def listener_warnings(caplog: pytest.LogCaptureFixture, text: str, namespace: str) -> list[str]:
    """The wake-up listener's WARNING lines about ``namespace``'s channel that say ``text``
    (listeners of other tests' stopped servers may be retrying meanwhile)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "django_redis_locks.core.runtime.wakeup"
        and r.levelno == logging.WARNING
        and text in r.getMessage()
        and f"{namespace}:wake:" in r.getMessage()
    ]


def test_a_refused_subscribe_is_logged_once_at_warning_and_retried(
    make_server, caplog: pytest.LogCaptureFixture
) -> None:
    """A user whose ACL refuses SUBSCRIBE: the listener says so once at WARNING (not at every
    retry), retries, and says when it listens again."""
    server = make_server()
    commands = tuple(c for c in CLIENT_COMMANDS if c != "subscribe") + SCRIPT_COMMANDS
    user = AclUser(
        "nosubscribe", "pw-" + secrets.token_hex(8), ("refused:*",), ("refused:*",), commands
    )
    with server.client(socket_timeout=5) as admin:
        admin.execute_command("ACL", "SETUSER", user.name, *user.rule())
        client = redis.Redis(
            host=server.host,
            port=server.port,
            username=user.name,
            password=user.password,
            socket_timeout=5,
        )
        backend = Backend(client, namespace="refused")
        holder = Lock("gate", client=backend, timeout=10)
        assert holder.acquire()
        waiter = Lock("gate", client=backend, timeout=10)
        result: list[bool] = []
        caplog.set_level(logging.WARNING, "django_redis_locks.core.runtime.wakeup")

        def wait_for_it() -> None:
            result.append(waiter.acquire(timeout=30))
            waiter.release()

        thread = threading.Thread(target=wait_for_it)
        thread.start()
        wait_until(  # (it came after more than 5 s once, on a loaded machine)
            lambda: bool(listener_warnings(caplog, "cannot listen", "refused")),
            timeout=20,
            what="the warning",
        )
        time.sleep(2.0)  # several retries (back-off up to 1 s) while it is refused
        [refused] = listener_warnings(caplog, "cannot listen", "refused")  # once, not per retry
        assert "NOPERM" in refused or "NoPermission" in refused, refused
        holder.release()  # the waiter gets it at a re-check (no wake-up can reach it)
        thread.join(timeout=30)
        assert result == [True]
        # SUBSCRIBE is allowed now: the next waiter subscribes, and is woken by the release.
        admin.execute_command("ACL", "SETUSER", user.name, "+subscribe")
        assert holder.acquire()
        woken: list[float] = []

        def wait_again() -> None:
            if waiter.acquire(timeout=30):
                woken.append(time.monotonic())
                waiter.release()

        thread = threading.Thread(target=wait_again)
        thread.start()
        wait_until(
            lambda: bool(listener_warnings(caplog, "listens again", "refused")),
            timeout=20,
            what="listens again",
        )
        released = time.monotonic()
        holder.release()
        thread.join(timeout=30)
        assert woken and woken[0] - released < 0.5  # woken, not re-checked
        assert len(listener_warnings(caplog, "cannot listen", "refused")) == 1
    client.close()
    backend.close()


def test_a_message_that_cannot_be_passed_on_is_reported_and_the_waiter_rechecks(
    backend: Backend, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re-checks are 3 s apart and the release comes once the waiter reads the subscription:
    the message is read before any re-check (with re-checks 1 s apart, a loaded CI machine
    once saw the waiter take the lock at a re-check before it read the message)."""
    monkeypatch.setattr(Lock, "recheck_seconds", 3.0)
    holder = Lock("phoenix", client=backend, timeout=10)
    waiter = Lock("phoenix", client=backend, timeout=10)
    hub = backend.hub()
    broken = threading.Event()

    def wake_badly(member: str, news: str = "") -> None:
        broken.set()
        raise RuntimeError("a bug in the listener")

    caplog.set_level(logging.WARNING, "django_redis_locks.core.runtime.wakeup")
    monkeypatch.setattr(hub, "_wake", wake_badly)
    assert holder.acquire()
    result: list[bool] = []

    def wait_once() -> None:
        result.append(waiter.acquire(timeout=10))  # no exception: it re-checks
        waiter.release()

    thread = threading.Thread(target=wait_once)
    thread.start()
    wait_until(lambda: waiting(backend, waiter), timeout=10, what="waiter registered")
    wait_until(hub._reader.locked, timeout=10, what="the waiter reads the subscription")
    holder.release()
    assert broken.wait(5)
    thread.join(timeout=15)
    assert result == [True]
    assert listener_warnings(caplog, "failed to pass a message on", backend.keys.namespace)


def test_a_listener_thread_that_died_is_reported_and_started_again(
    redis_server, namespace: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncio waiters are read for by a listener thread; one that died (a bug) is reported,
    its waiters fall back to re-checks, and the next asyncio waiter starts a new one.
    Re-checks are 3 s apart here, so a wake-up is told from a re-check on a loaded machine
    too (a CI run under load saw 1.48 s with re-checks 1 s apart)."""
    monkeypatch.setattr(Lock, "recheck_seconds", 3.0)
    caplog.set_level(logging.WARNING, "django_redis_locks.core.runtime.wakeup")

    async def scenario() -> float:
        client = redis.asyncio.Redis.from_url(redis_server.url, socket_timeout=5)
        backend = Backend(client, namespace=namespace)
        hub = backend.hub()
        holder = Lock("phoenix", client=backend, timeout=10)
        waiter = Lock("phoenix", client=backend, timeout=10)
        read = hub._subscription.read
        failed = threading.Event()

        def read_badly(timeout: float) -> None:
            failed.set()
            raise RuntimeError("a bug in the listener")

        hub._subscription.read = read_badly  # type: ignore[method-assign]
        assert await holder.aacquire()
        task = asyncio.create_task(waiter.aacquire(timeout=5))
        while not failed.is_set():
            await asyncio.sleep(0.01)
        hub._subscription.read = read  # type: ignore[method-assign]
        await holder.arelease()
        assert await task  # by a re-check
        await waiter.arelease()
        # The next asyncio waiter starts the listener again, and is woken by the release.
        assert await holder.aacquire()
        task = asyncio.create_task(waiter.aacquire(timeout=5))
        while not hub_has_waiter(backend, "lock:phoenix") or not hub.ready:
            await asyncio.sleep(0.01)
        released = time.monotonic()
        await holder.arelease()
        assert await task
        woken_after = time.monotonic() - released
        await waiter.arelease()
        await client.aclose()
        backend.close()
        return woken_after

    woken_after = asyncio.run(scenario())
    assert listener_warnings(caplog, "failed; waiters fall back to re-checks", namespace)
    assert woken_after < 1.5  # woken, not re-checked


def test_every_sync_waiter_of_a_process_is_woken_when_several_slots_free_at_once(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An outside review: with three slots freed at once and three blocked threads of one
    process admitted, only the first two were woken; the third waited for its re-check. The
    reader that left handed the reading on to a waiter that was not blocked (woken already,
    on its way to its acquire), so nobody read the third message. Re-checks are made 5 s apart
    here, so a missed wake-up shows."""
    monkeypatch.setattr(Semaphore, "recheck_seconds", 5.0)
    for round_ in range(3):  # (which waiter reads when is a race: three rounds)
        _three_slots_freed_at_once(backend, f"slots{round_}")


def _three_slots_freed_at_once(backend: Backend, name: str) -> None:
    holders = [Semaphore(name, 3, client=backend, timeout=30) for _ in range(3)]
    for holder in holders:
        assert holder.acquire(blocking=False)
    acquired: list[float] = []
    mutex = threading.Lock()

    def wait_for_a_slot() -> None:
        semaphore = Semaphore(name, 3, client=backend, timeout=30)
        assert semaphore.acquire(timeout=20)
        with mutex:
            acquired.append(time.monotonic())
        semaphore.release()

    threads = [threading.Thread(target=wait_for_a_slot) for _ in range(3)]
    for thread in threads:
        thread.start()
    wait_until(
        lambda: (
            sum(1 for key in list(backend.hub()._waiters) if key.startswith(f"sem:{name}#")) == 3
        ),
        timeout=10,
        what="three waiters registered",
    )
    time.sleep(0.1)  # (each past its first attempt, blocked in its wait)
    released = time.monotonic()
    for holder in holders:
        holder.release()
    for thread in threads:
        thread.join(timeout=30)
    assert len(acquired) == 3
    assert max(acquired) - released < 2.0, [round(t - released, 3) for t in acquired]

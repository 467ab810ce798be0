"""A cancellation (asyncio) or Ctrl-C (KeyboardInterrupt) at any point of an acquire or a
release leaves nothing held that the caller does not know about.

The slow step is made honestly: a proxy between the library and a real server holds every
reply back for a while, and the interruption (``asyncio.wait_for``'s timeout, a SIGINT) lands
while a given reply is on its way.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from django_redis_locks.core import Backend, Lock, Semaphore
from django_redis_locks.core.events import Event, subscribe, unsubscribe
from django_redis_locks.core.protocol import scripting
from django_redis_locks.core.runtime.renewal import renewer
from django_redis_locks.core.runtime.waiters import SyncWaiter
from tests.harness.clients import sync_from_url
from tests.harness.plugin import MakeServer
from tests.harness.proxy import ReplyProxy
from tests.helpers import is_held

#: How long the proxy holds each reply back when told to.
DELAY = 0.5


@dataclass
class Slow:
    """A Backend that talks through a proxy (replies forwarded until told otherwise), and a
    direct client of the same server for checks. The Backend has made no call yet: the
    first one in this process is still to come (and with it the eviction check)."""

    proxy: ReplyProxy
    backend: Backend
    direct: redis.Redis


@pytest.fixture
def slow(make_server: MakeServer, namespace: str) -> Iterator[Slow]:
    server = make_server()
    with server.client(socket_timeout=5) as direct:
        # Load the scripts through another Backend: no NOSCRIPT round trip through the proxy.
        warm = Lock("warm-up", client=Backend(direct, namespace=namespace))
        assert warm.acquire(blocking=False)
        warm.release()
        with ReplyProxy(server.host, server.port) as proxy:
            client = sync_from_url(proxy.url, socket_timeout=5, socket_connect_timeout=5)
            backend = Backend(client, namespace=namespace)
            assert backend.checked_in == 0
            try:
                yield Slow(proxy, backend, direct)
            finally:
                proxy.forward_replies()
                backend.close()
                client.close()


@pytest.fixture(autouse=True)
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in this module's tests, as in a program run from a
    terminal, also when the test run itself was started with SIGINT ignored (a background
    job of a shell without job control, nohup), which Python then leaves ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def sigint_after(seconds: float) -> Iterator[None]:
    """Deliver SIGINT to the main thread (this test's) ``seconds`` after entering."""
    main = threading.main_thread().ident
    assert main == threading.get_ident(), "the test must run in the main thread"
    timer = threading.Timer(seconds, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()


# -- 4: the first call's eviction check -------------------------------------------------------


def test_a_cancellation_during_the_first_calls_eviction_check_leaves_nothing_held(
    slow: Slow,
) -> None:
    """The first call of a process also reads INFO (the eviction check). With every reply
    0.5 s late, the acquire's reply comes at 0.5 s and INFO's at 1 s; wait_for gives up at
    0.75 s, while INFO is on its way: the acquire must be undone, not left held and renewed."""
    lock = Lock("first-call", client=slow.backend, timeout=30, auto_renew=True)
    key = lock._keys_for(slow.backend).lock

    async def main() -> None:
        aclient = await slow.backend.aclient()
        await aclient.ping()  # the connection is made (its handshake is not delayed)
        slow.proxy.delay_replies(DELAY)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(lock.aacquire(blocking=False), 1.5 * DELAY)
        assert time.monotonic() - started > DELAY, "cancelled before the acquire's reply came"
        slow.proxy.forward_replies()
        assert slow.backend.checked_in, "the eviction check did not start"
        assert not is_held(slow.direct, key), "the cancelled acquire left the lock held"
        assert lock.holder_id is None
        assert renewer().renewing(slow.backend) == 0
        assert await lock.aacquire(blocking=False)  # not LockAlreadyHeld
        await lock.arelease()

    asyncio.run(main())


def test_ctrl_c_during_the_first_calls_eviction_check_leaves_nothing_held(slow: Slow) -> None:
    """The same with the sync API and a SIGINT landing while INFO's reply is on its way."""
    lock = Lock("first-call-sync", client=slow.backend, timeout=30, auto_renew=True)
    key = lock._keys_for(slow.backend).lock
    slow.backend.client.ping()  # the connection is made (its handshake is not delayed)
    slow.proxy.delay_replies(DELAY)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), sigint_after(1.5 * DELAY):
        lock.acquire(blocking=False)
    assert time.monotonic() - started > 1.5 * DELAY
    slow.proxy.forward_replies()
    assert slow.backend.checked_in, "the eviction check did not start"
    assert not is_held(slow.direct, key), "the interrupted acquire left the lock held"
    assert lock.holder_id is None
    assert renewer().renewing(slow.backend) == 0
    assert lock.acquire(blocking=False)  # not LockAlreadyHeld
    lock.release()


# -- 5: a release interrupted before its script went out ---------------------------------------


def test_a_release_cancelled_before_its_script_went_out_still_releases(slow: Slow) -> None:
    """The release needs a new connection whose handshake reply is 0.5 s late; the caller's
    timeout (0.25 s) cancels it before the script is sent. The release must still happen
    (not leave the name taken for its 30 s TTL), and the hold be forgotten."""
    lock = Lock("cancelled-release", client=slow.backend, timeout=30, auto_renew=True)
    key = lock._keys_for(slow.backend).lock

    async def main() -> None:
        assert await lock.aacquire(blocking=False)
        aclient = await slow.backend.aclient()
        await aclient.connection_pool.disconnect()  # the release must connect anew
        slow.proxy.delay_replies(DELAY)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(DELAY / 2):
                await lock.arelease()
        slow.proxy.forward_replies()
        await asyncio.sleep(0)  # (a release finishing in the background may have it now)
        assert not is_held(slow.direct, key), "the cancelled release left the lock held"
        assert lock.holder_id is None
        assert renewer().renewing(slow.backend) == 0
        other = Lock("cancelled-release", client=slow.backend, timeout=30)
        assert await other.aacquire(blocking=False)
        await other.arelease()

    asyncio.run(main())


def test_a_release_interrupted_by_ctrl_c_before_its_script_went_out_still_releases(
    slow: Slow,
) -> None:
    lock = Lock("interrupted-release", client=slow.backend, timeout=30, auto_renew=True)
    key = lock._keys_for(slow.backend).lock
    assert lock.acquire(blocking=False)
    slow.backend.client.connection_pool.disconnect()  # the release must connect anew
    slow.proxy.delay_replies(DELAY)
    with pytest.raises(KeyboardInterrupt), sigint_after(DELAY / 2):
        lock.release()
    slow.proxy.forward_replies()
    assert not is_held(slow.direct, key), "the interrupted release left the lock held"
    assert lock.holder_id is None
    assert renewer().renewing(slow.backend) == 0
    assert lock.acquire(blocking=False)
    lock.release()


# -- 7b: Ctrl-C while a grant is being recorded ------------------------------------------------


def test_ctrl_c_while_an_acquire_is_being_recorded_leaves_nothing_held(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """The grant came back and is being recorded (here: an "acquired" event receiver runs)
    when Ctrl-C lands: the acquire raises KeyboardInterrupt, so it must leave no hold, in
    Redis or in the process."""
    lock = Lock("being-recorded", client=backend, timeout=30, auto_renew=True)
    key = lock._keys_for(backend).lock
    main = threading.get_ident()
    assert main == threading.main_thread().ident

    def slow_receiver(event: Event) -> None:
        if event.event == "acquired" and event.name == "being-recorded":
            signal.pthread_kill(main, signal.SIGINT)  # Ctrl-C, while the receiver runs
            time.sleep(5)

    subscribe(slow_receiver)
    try:
        with pytest.raises(KeyboardInterrupt):
            lock.acquire(blocking=False)
    finally:
        unsubscribe(slow_receiver)
    assert not is_held(redis_client, key), "the interrupted acquire left the lock held"
    assert lock.holder_id is None
    assert renewer().renewing(backend) == 0
    assert lock.acquire(blocking=False)  # not LockAlreadyHeld
    lock.release()


def test_ctrl_c_while_a_blocking_acquire_lets_go_of_its_wake_ups_leaves_nothing_held(
    backend: Backend, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blocking acquire that got the lock stops listening for wake-ups (its waiter is
    closed) and Ctrl-C lands right then: the acquire raises KeyboardInterrupt, so it must
    leave no hold, in Redis or in the process."""
    lock = Lock("closing-waiter", client=backend, timeout=30)
    key = lock._keys_for(backend).lock
    backend.hub().wait_ready(5)  # listening already: the acquire registers its waiter first
    original = SyncWaiter.close

    def interrupted_close(self: SyncWaiter) -> None:
        original(self)
        raise KeyboardInterrupt  # (as a SIGINT landing at the end of close())

    monkeypatch.setattr(SyncWaiter, "close", interrupted_close)
    with pytest.raises(KeyboardInterrupt):
        lock.acquire(blocking=True, timeout=5)
    monkeypatch.setattr(SyncWaiter, "close", original)
    assert not is_held(redis_client, key), "the interrupted acquire left the lock held"
    assert lock.holder_id is None
    assert lock.acquire(blocking=False)  # not LockAlreadyHeld
    lock.release()


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_ctrl_c_while_a_first_release_reads_its_script_still_releases(
    backend: Backend, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A process's first release reads its script from the package: a Ctrl-C landing while it
    does (here: the read raises KeyboardInterrupt, once) must still release, not leave the
    name taken for its TTL."""
    primitive = (
        Lock("first-release", client=backend, timeout=30)
        if kind == "lock"
        else Semaphore("first-release", 1, client=backend, timeout=30)
    )
    assert primitive.acquire(blocking=False)
    for name in ("lock_release", "sem_release"):  # as in a process that released nothing yet
        monkeypatch.delitem(scripting._CACHE, name, raising=False)
    original = scripting._read
    interrupted: list[tuple[str, ...]] = []

    def read(*parts: str) -> str:
        if not interrupted:
            interrupted.append(parts)
            raise KeyboardInterrupt  # (as a SIGINT landing during the read)
        return original(*parts)

    monkeypatch.setattr(scripting, "_read", read)
    with pytest.raises(KeyboardInterrupt):
        primitive.release()
    assert interrupted, "the release did not read its script"
    other = (
        Lock("first-release", client=backend, timeout=30)
        if kind == "lock"
        else Semaphore("first-release", 1, client=backend, timeout=30)
    )
    assert other.acquire(blocking=False), "the interrupted release left the name taken"
    other.release()
    assert primitive.acquire(blocking=False)  # the hold was forgotten: not LockAlreadyHeld
    primitive.release()

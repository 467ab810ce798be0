"""A paused or dead Redis: every call fails within the socket timeout, with a clear error."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from django_redis_locks import Lock, LockBackendError, LockLost
from django_redis_locks.core import Backend

SOCKET_TIMEOUT = 0.5
BOUND = SOCKET_TIMEOUT * 2 + 0.5  # one timeout, plus slack for a 2-core machine


@pytest.fixture
def paused(make_server):
    """A private server with a lock held on it, then paused (SIGSTOP)."""
    server = make_server()
    client = server.client(socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT)
    backend = Backend(client, namespace="paused")
    holder = Lock("held", client=backend, timeout=1)
    assert holder.acquire()
    server.pause()
    yield server, backend, holder
    server.resume()
    backend.close()
    client.close()


def timed(call):
    started = time.monotonic()
    with pytest.raises(LockBackendError) as info:
        call()
    return time.monotonic() - started, info.value


@pytest.mark.parametrize(
    "operation",
    ["acquire", "acquire_blocking", "release", "extend", "locked", "owned", "ensure_held"],
)
def test_every_call_fails_within_the_socket_timeout(paused, operation) -> None:
    _, backend, holder = paused
    other = Lock("other", client=backend, timeout=1)
    calls = {
        "acquire": lambda: other.acquire(blocking=False),
        "acquire_blocking": lambda: other.acquire(timeout=30),
        "release": holder.release,
        "extend": lambda: holder.extend(1),
        "locked": other.locked,
        "owned": holder.owned,
        "ensure_held": holder.ensure_held,
    }
    elapsed, error = timed(calls[operation])
    assert elapsed < BOUND, f"{operation} took {elapsed:.2f} s"
    assert "Timeout" in str(error) and isinstance(error.__cause__, redis.RedisError)


def test_async_calls_fail_within_the_socket_timeout(paused) -> None:
    server, _, _ = paused

    async def main() -> float:
        client = redis.asyncio.Redis(
            host=server.host,
            port=server.port,
            socket_timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=SOCKET_TIMEOUT,
        )
        backend = Backend(client, namespace="paused")
        lock = Lock("async", client=backend, timeout=1)
        started = time.monotonic()
        try:
            with pytest.raises(LockBackendError):
                await lock.aacquire(timeout=30)
            return time.monotonic() - started
        finally:
            await client.aclose()
            backend.close()
            backend.client.close()

    assert asyncio.run(main()) < BOUND + 1.0  # includes connecting the asyncio client


def test_hold_expired_during_the_pause_is_reported_as_lost(paused) -> None:
    _, _, holder = paused
    hold = holder._current_hold()
    assert hold is not None
    hold.expires_at = time.monotonic() - 0.01  # as if the pause outlasted the TTL
    with pytest.raises(LockLost, match="could not be reached"):
        holder.ensure_held()


def test_work_resumes_after_the_pause(paused) -> None:
    server, _, holder = paused
    with pytest.raises(LockBackendError):
        holder.extend(1)
    server.resume()
    assert holder.extend(5) > 5  # the hold is kept after a failed call
    holder.release()


def test_dead_server_fails_fast(make_server) -> None:
    server = make_server()
    client = server.client(socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT)
    backend = Backend(client, namespace="dead")
    server.kill()
    elapsed, error = timed(lambda: Lock("x", client=backend, timeout=1).acquire())
    assert elapsed < BOUND
    assert "Connection" in str(error)
    backend.close()
    client.close()


def test_with_block_ended_during_the_pause_does_not_wedge_the_lock(paused) -> None:
    server, backend, _ = paused
    server.resume()
    lock = Lock("wedge", client=backend, timeout=0.5)
    with pytest.raises(LockBackendError), lock:  # raised on leaving the block
        server.pause()
    server.resume()
    # The failed release left a hold that nobody renews: it expires, and the same thread
    # can take the lock again (no LockAlreadyHeld).
    assert lock.acquire(timeout=5)
    lock.release()

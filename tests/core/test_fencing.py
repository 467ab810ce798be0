"""Fencing numbers strictly increase per name: across grants, holders and server restarts."""

from __future__ import annotations

import itertools
import time

from django_redis_locks import Lock
from django_redis_locks.core import Backend


def test_fences_increase_over_1000_grants(backend: Backend) -> None:
    lock = Lock("fenced", client=backend, timeout=5)
    other = Lock("fenced", client=backend, timeout=5)
    fences: list[int] = []
    for i in range(1000):
        holder = lock if i % 2 else other  # alternate holders
        holder.acquire()
        assert holder.fence is not None
        fences.append(holder.fence)
        holder.release()
    assert all(b > a for a, b in itertools.pairwise(fences))


def test_fence_of_a_name_is_independent_of_other_names(backend: Backend) -> None:
    a = Lock("fence-a", client=backend, timeout=5)
    b = Lock("fence-b", client=backend, timeout=5)
    with a:
        first = a.fence
    with b:
        pass
    with a:
        assert a.fence is not None and first is not None and a.fence > first


def test_fence_counter_wins_when_ahead_of_the_clock(backend: Backend, redis_client) -> None:
    """The counter part of max(counter + 1, server time in us)."""
    lock = Lock("ahead", client=backend, timeout=5)
    fence_key = lock._keys_for(backend).lock  # the fence lives in the lock hash
    far_ahead = int(time.time() * 1_000_000) + 10**12
    redis_client.hset(fence_key, "fence", far_ahead)
    with lock:
        assert lock.fence == far_ahead + 1
    with lock:
        assert lock.fence == far_ahead + 2


def test_fences_keep_increasing_across_a_restart_without_persistence(make_server) -> None:
    server = make_server()
    client = server.client(socket_timeout=5)
    backend = Backend(client, namespace="restart")
    lock = Lock("survivor", client=backend, timeout=5)
    before: list[int] = []
    for _ in range(5):
        with lock:
            assert lock.fence is not None
            before.append(lock.fence)
    client.close()
    server.restart()
    assert server.client(socket_timeout=5).dbsize() == 0  # the data is gone
    client = server.client(socket_timeout=5)
    lock = Lock("survivor", client=Backend(client, namespace="restart"), timeout=5)
    with lock:
        after = lock.fence
    assert after is not None and after > max(before)
    client.close()

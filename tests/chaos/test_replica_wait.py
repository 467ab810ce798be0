"""Scenario 7: ``wait_for_replicas`` with a replica that stops (SIGSTOP) and comes back, and
what a promoted replica does and does not keep.

Pass rule: while the replica is stopped, every acquire with ``wait_for_replicas`` fails with
``LockNotReplicated`` after about ``REPLICA_WAIT_TIMEOUT`` and leaves nothing (no live hold,
no queue, nothing listed; once the replica is back it has no hold either); with the replica
live every acquire succeeds and the replica has the hold when ``acquire()`` returns.

The promotion test shows the failover case of docs/guarantees.md by hand (``REPLICAOF NO
ONE`` after the primary was killed, as Sentinel would do): a lock acquired with
``wait_for_replicas=1`` is still held on the promoted replica; one acquired without it while
the replication stream was being lost is gone, so a second holder gets it, with a larger
fence (both servers read the same machine's clock).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from django_redis_locks.core import Backend, Lock, LockNotReplicated
from django_redis_locks.inspection import get_lock
from tests.harness.proxy import ReplyProxy
from tests.harness.servers import RedisServer, wait_for_replica, wait_until
from tests.helpers import is_held

pytestmark = pytest.mark.chaos

REPLICA_WAIT = 0.3
ROUNDS = 3
TRIES = 3


@dataclass
class Pair:
    primary: RedisServer
    replica: RedisServer
    client: redis.Redis
    replica_client: redis.Redis
    backend: Backend


@pytest.fixture
def pair(make_server: Any, make_replica: Any) -> Iterator[Pair]:
    primary = make_server()
    replica = make_replica(primary)
    with primary.client(socket_timeout=5) as client, replica.client(socket_timeout=5) as rclient:
        backend = Backend(client, namespace="wait", replica_wait_timeout=REPLICA_WAIT)
        yield Pair(primary, replica, client, rclient, backend)
        backend.close()


@pytest.mark.parametrize("replicas", [1, "majority"])
def test_acquires_waiting_for_a_stopped_replica_fail_and_leave_nothing(
    pair: Pair, figures: dict[str, Any], replicas: int | str
) -> None:
    lock = Lock("replicated", client=pair.backend, timeout=10, wait_for_replicas=replicas)  # type: ignore[arg-type]
    keys = lock._keys_for(pair.backend)
    live: list[float] = []
    failed: list[float] = []
    fences: list[int] = []
    for _ in range(ROUNDS):
        started = time.monotonic()
        assert lock.acquire(blocking=False)
        live.append(time.monotonic() - started)
        assert pair.replica_client.hget(keys.lock, "token") == pair.client.hget(keys.lock, "token")
        assert lock.fence is not None
        fences.append(lock.fence)
        lock.release()
        pair.replica.pause()
        try:
            for blocking in [False, True] * (TRIES // 2) + [False] * (TRIES % 2):
                started = time.monotonic()
                with pytest.raises(LockNotReplicated, match="0 of 1 replicas"):
                    lock.acquire(blocking=blocking, timeout=5 if blocking else None)
                failed.append(time.monotonic() - started)
                assert not is_held(pair.client, keys.lock)
                assert not pair.client.exists(keys.queue, keys.waiters)
                assert get_lock("replicated", client=pair.backend) is None
                assert lock.holder_id is None  # nothing held as far as the object knows
                other = Lock("replicated", client=pair.backend, timeout=1)
                assert other.acquire(blocking=False)  # free for anyone meanwhile
                other.release()
        finally:
            pair.replica.resume()
        wait_for_replica(pair.primary, pair.replica)
        assert not is_held(pair.replica_client, keys.lock)  # the undo reached the replica
    figures.update(
        replica_wait_timeout_s=REPLICA_WAIT,
        acquires_with_the_replica_live_s=[round(t, 3) for t in live],
        acquires_failed_after_s=[round(t, 3) for t in failed],
    )
    assert len(failed) == ROUNDS * TRIES
    assert all(REPLICA_WAIT * 0.9 <= t <= REPLICA_WAIT + 1.0 for t in failed)
    assert all(t < REPLICA_WAIT for t in live)
    assert fences == sorted(fences)


def test_a_promoted_replica_keeps_a_replicated_lock_and_loses_an_unreplicated_one(
    make_server: Any, figures: dict[str, Any]
) -> None:
    primary = make_server()
    # The replica follows the primary through a proxy that can lose the replication stream in
    # transit (a stopped replica would still find the bytes in its socket buffer when it
    # runs again, and catch up).
    with ReplyProxy(primary.host, primary.port) as link:
        replica = make_server(extra_args=["--replicaof", link.host, str(link.port)])
        wait_for_replica(primary, replica)
        with (
            primary.client(socket_timeout=5) as client,
            replica.client(socket_timeout=5) as replica_client,
        ):
            backend = Backend(client, namespace="failover", replica_wait_timeout=1)
            replicated = Lock("replicated", client=backend, timeout=30, wait_for_replicas=1)
            assert replicated.acquire(blocking=False)
            link.drop_replies()  # from now on the replica receives nothing
            unreplicated = Lock("unreplicated", client=backend, timeout=30)
            assert unreplicated.acquire(blocking=False)  # the primary has it, the replica not
            old_fence = unreplicated.fence
            primary.kill()
            replica_client.replicaof("NO", "ONE")  # what Sentinel does to the best replica
            wait_until(
                lambda: replica_client.info("replication")["role"] == "master",
                timeout=10,
                what="the replica to be promoted",
            )
            promoted = Backend(replica_client, namespace="failover")
            kept = not Lock("replicated", client=promoted, timeout=5).acquire(blocking=False)
            second = Lock("unreplicated", client=promoted, timeout=5)
            double_grant = second.acquire(blocking=False)
            figures.update(
                replicated_lock_kept=kept,
                unreplicated_lock_granted_again=double_grant,
                old_fence=old_fence,
                new_fence=second.fence,
            )
            assert kept
            assert double_grant  # the documented limit: without WAIT, a failover loses a lock
            assert second.fence is not None and old_fence is not None
            assert second.fence > old_fence  # one machine's clock: fences still increase
            second.release()
            promoted.close()
            backend.close()

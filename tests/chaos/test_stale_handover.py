"""A waiter stopped (SIGSTOP) while a release hands it the lock (or admits it to a
semaphore), continued after the hold it was handed has run out and someone else has taken it.

Pass rule: its ``acquire()`` does not return True while the other holder holds the lock or
the only slot (no double grant), and when it does return, its fence is larger.

Found by scenario 8: a hand-over arrives as a wake-up message, and a waiter used to trust it
however late it read it. Now a hand-over only reserves the hold for a short window (again
while the waiter's place lasts), and the woken waiter confirms it with one more script run,
which finds a hold that ran out meanwhile gone.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from django_redis_locks.core import Backend, Lock, Semaphore
from django_redis_locks.core.runtime.acquiring import WAITER_LEASE_SECONDS
from django_redis_locks.inspection import get_lock, get_semaphore
from tests.chaos.processes import Holder, Processes, worker_command
from tests.harness.servers import wait_until

pytestmark = pytest.mark.chaos

TTL = 1.0


def subscribed(client: redis.Redis, namespace: str) -> bool:
    """Whether a process listens for wake-ups of the namespace: a waiter stopped before its
    listener subscribed never hears of the hand-over (its first try queues before that)."""
    return bool(client.pubsub_channels(f"{namespace}:wake*"))


def test_a_waiter_stopped_while_handed_the_lock_does_not_believe_it_holds_it_later(
    processes: Processes,
    redis_server: Any,
    redis_client: redis.Redis,
    namespace: str,
    figures: dict[str, Any],
) -> None:
    backend = Backend(redis_client, namespace=namespace)
    first = Lock("handed", client=backend, timeout=30)
    assert first.acquire()
    waiter = Holder(
        processes,
        worker_command("holder", url=redis_server.url, namespace=namespace, name="handed", ttl=TTL),
        wait_held=False,
    )
    queue = first._keys_for(backend).queue
    wait_until(
        lambda: redis_client.zcard(queue) == 1 and subscribed(redis_client, namespace),
        timeout=10,
        what="the waiter queued and listening",
    )
    waiter.pause()
    first.release()  # hands the lock to the stopped waiter
    info = get_lock("handed", client=backend)
    assert info is not None and info.pid == waiter.pid
    # The stopped waiter keeps its place until its lease runs out, and is handed the lock
    # again each time the window runs out meanwhile; then a newcomer takes it.
    second = Lock("handed", client=backend, timeout=30)
    wait_until(
        lambda: second.acquire(blocking=False),
        timeout=WAITER_LEASE_SECONDS + TTL * 3,
        what="the stopped waiter's place to run out and a newcomer to take the lock",
    )
    waiter.resume()
    early = waiter.poll("held", timeout=2 * Lock.recheck_seconds + 0.5)
    figures.update(
        second_fence=second.fence,
        waiter_held_while_the_second_held=early is not None,
        waiter_fence=early["fence"] if early else None,
    )
    assert early is None, f"acquire() returned while another holder held the lock: {early}"
    second.release()
    held = waiter.wait_for("held", timeout=10)
    assert held["fence"] > (second.fence or 0)


def test_a_waiter_stopped_while_admitted_to_a_semaphore_does_not_believe_it_holds_a_slot_later(
    processes: Processes,
    redis_server: Any,
    redis_client: redis.Redis,
    namespace: str,
    figures: dict[str, Any],
) -> None:
    backend = Backend(redis_client, namespace=namespace)
    first = Semaphore("admitted", 1, client=backend, timeout=30)
    assert first.acquire()
    waiter = Holder(
        processes,
        worker_command(
            "holder",
            url=redis_server.url,
            namespace=namespace,
            name="admitted",
            ttl=TTL,
            kind="semaphore",
            limit=1,
        ),
        wait_held=False,
    )
    queue = first._keys_for(backend).queue
    wait_until(
        lambda: redis_client.zcard(queue) == 1 and subscribed(redis_client, namespace),
        timeout=10,
        what="the waiter queued and listening",
    )
    waiter.pause()
    first.release()  # admits the stopped waiter
    wait_until(
        lambda: get_semaphore("admitted", client=backend) is None,
        timeout=TTL * 3,
        what="the admitted waiter's slot to run out",
    )
    second = Semaphore("admitted", 1, client=backend, timeout=30)
    assert second.acquire(blocking=False)
    waiter.resume()
    early = waiter.poll("held", timeout=2 * Semaphore.recheck_seconds + 0.5)
    figures.update(waiter_held_while_the_second_held=early is not None)
    assert early is None, f"acquire() returned while the only slot was held: {early}"
    second.release()
    waiter.wait_for("held", timeout=10)

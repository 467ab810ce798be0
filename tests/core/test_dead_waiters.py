"""A release never hands the lock (or a slot) to a dead waiter for long, and dead waiters are
dropped with bounded work per script.

A waiter SIGKILLed while queued keeps its place until its lease runs out (3 s after its last
ask); a release meanwhile hands it the lock. The hand-over lasts a short confirmation window
only, which a live waiter closes at once by confirming it; a dead one never does, and is
handed the name again only while its place lasts: after a waiter died, the name is free
again within its lease, whatever the TTL.
"""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from django_redis_locks import Lock, Semaphore
from django_redis_locks.core import Backend
from django_redis_locks.core.protocol import lock_calls as protocol
from tests.harness.acl import silent_channel
from tests.harness.servers import wait_until

ROOT = Path(__file__).resolve().parents[2]
TTL = 30.0
# Seconds after the release, whatever the TTL: the killed waiter's lease (it asked at most a
# re-check before the kill), and a little slack.
FREE_WITHIN = protocol.WAITER_LEASE_MS / 1000 + 0.5


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_release_to_a_killed_waiter_frees_the_name_within_its_lease(
    redis_server: Any, backend: Backend, redis_client: Any, kind: str
) -> None:
    def make(**options: Any) -> Lock | Semaphore:
        if kind == "lock":
            return Lock("handed", client=backend, timeout=TTL, **options)
        return Semaphore("handed", 1, client=backend, timeout=TTL, **options)

    holder = make()
    assert holder.acquire()
    keys = holder._keys_for(backend)
    queue = keys.queue
    waiter = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.core.workers",
            "wait",
            redis_server.url,
            backend.keys.namespace,
            "handed",
            kind,
            str(TTL),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: redis_client.zcard(queue) == 1, timeout=10, what="the waiter queued")
        waiter.send_signal(signal.SIGKILL)
        waiter.wait(timeout=10)
        holder.release()  # hands the name to the dead waiter, whose place is still leased
        released = time.monotonic()
        late = make()
        assert late.acquire(timeout=FREE_WITHIN + 3)  # blocked until the name is free
        free_after = time.monotonic() - released
    finally:
        if waiter.poll() is None:
            waiter.kill()
        waiter.communicate(timeout=10)
    print(f"{kind} handed to a killed waiter: free again {free_after:.2f} s after the release")
    assert free_after < FREE_WITHIN  # the TTL is 30 s
    late.release()


LEASE_MS = 3_000  # long enough to queue them all, then they die


@pytest.mark.parametrize(
    "dead", [20_000, pytest.param(200_000, marks=pytest.mark.chaos)], ids=["20k", "200k"]
)
def test_dead_waiters_cost_a_release_bounded_work(
    backend: Backend, redis_client: Any, dead: int
) -> None:
    """Waiters whose places ran out are dropped a bounded number per script, wherever they
    are in the queue: no release (nor acquire) has to walk them all."""
    keys = backend.keys.lock("crowded")
    holder = Lock("crowded", client=backend, timeout=TTL)
    assert holder.acquire()
    channel = silent_channel(backend)
    started = time.monotonic()
    pipe = redis_client.pipeline(transaction=False)
    for i in range(dead):
        call = protocol.acquire_call(
            keys, f"dead-{i}", 10_000, "{}", queue=True, lease_ms=LEASE_MS, channel=channel
        )
        pipe.evalsha(*call.evalsha_args())
        if i % 10_000 == 9_999:
            pipe.execute()
    pipe.execute()
    print(f"{dead} waiters queued in {time.monotonic() - started:.1f} s")
    assert redis_client.zcard(keys.queue) == dead
    time.sleep(LEASE_MS / 1000)  # then they all die: every lease ran out
    timings = []
    # (Queuing them made many objects: a garbage collection of this process inside a timed
    # release once took 0.16 s of the 0.05 s allowed. Collect first, and not while timing.)
    gc.collect()
    gc.disable()
    try:
        for _ in range(5):
            started = time.perf_counter()
            holder.release()
            timings.append(time.perf_counter() - started)
            assert holder.acquire(blocking=False)
    finally:
        gc.enable()
    holder.release()
    print(f"release among {dead:,} dead waiters: {max(timings) * 1000:.1f} ms at most")
    assert max(timings) < 0.05  # 200,000 took 1.16 s: one script walked every dead waiter

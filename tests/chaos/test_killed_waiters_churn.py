"""Scenario 10: waiters SIGKILLed while the lock changes hands under churn.

Worker processes (``cycle`` jobs) take a lock with a long TTL (10 s), hold it a few ms,
release, and queue again, logging their hold intervals on the monotonic clock. A killer
SIGKILLs a *waiting* process (one that does not hold the lock) at random moments, and a new
process takes its place. A waiter killed in its queue keeps its place until its lease runs
out (3 s after its last ask), and a release in that time hands it the lock: for a
confirmation window at a time, and again while its place lasts, so the lock goes on within
that lease, never after the TTL.

Pass rule: no two logged holds overlap; every pause in service (the time between a release
and the next grant) lasts at most a lease per waiter killed in the 3 s before it (their places
were still leased, so each may have been handed the lock in turn until its lease ran out),
plus ``SLACK``: with one dead waiter, at most 3 s, where it used to be the 10 s TTL. (The
killer is far busier than real life: a kill every 1.25 s on average.) A process killed just
after it became the holder (the lock changes hands every few ms) is a killed holder: its lock
comes back after its TTL, as it should (plus a window per waiter killed meanwhile, which may be
handed the lock in turn), and that pause is reported apart.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from django_redis_locks.core import Backend
from django_redis_locks.core.protocol.lock_calls import HANDOVER_WINDOW_MS
from django_redis_locks.core.runtime.acquiring import WAITER_LEASE_SECONDS
from django_redis_locks.inspection import get_lock
from tests.chaos.processes import Processes, worker_command
from tests.chaos.sweep import Interval, log_lines, overlapping_pairs

pytestmark = pytest.mark.chaos

TTL = 10.0
WORKERS = 6
KILLS = 12
SECONDS = 40.0  # the churn goes on this long at most
WINDOW = HANDOVER_WINDOW_MS / 1000
SLACK = 0.5  # seconds, on top of the leases of the dead waiters
LONG = 0.5  # a pause in service at least this long is counted as a stall


def test_waiters_killed_in_the_queue_stall_the_lock_for_at_most_their_lease_not_the_ttl(
    processes: Processes,
    redis_server: Any,
    redis_client: redis.Redis,
    namespace: str,
    tmp_path: Path,
    figures: dict[str, Any],
    rng: random.Random,
) -> None:
    stop_file = tmp_path / "stop"
    logs: list[Path] = []
    alive: dict[int, subprocess.Popen[str]] = {}
    mutex = threading.Lock()

    def spawn() -> None:
        log = tmp_path / f"worker-{len(logs)}.log"
        logs.append(log)
        command = worker_command(
            "cycle",
            url=redis_server.url,
            namespace=namespace,
            name="baton",
            ttl=TTL,
            socket_timeout=5,
            work=0.01,
            step=0.005,
            acquire_wait=30,
            log=log,
            stop_file=stop_file,
        )
        process = processes.start(command)
        with mutex:
            alive[process.pid] = process

    for _ in range(WORKERS):
        spawn()
    backend = Backend(redis_client, namespace=namespace)
    kills: list[tuple[int, float]] = []
    holders_killed: list[float] = []
    started = time.monotonic()
    while len(kills) < KILLS and time.monotonic() - started < SECONDS:
        time.sleep(rng.uniform(0.5, 2.0))  # a random pause between two kills
        holder = get_lock("baton", client=backend)
        with mutex:
            waiting = [pid for pid in alive if holder is None or pid != holder.pid]
            if not waiting:
                continue
            victim = rng.choice(waiting)
            os.kill(victim, signal.SIGKILL)
            alive.pop(victim).wait(timeout=10)
        kills.append((victim, time.monotonic()))
        after = get_lock("baton", client=backend)
        if after is not None and after.pid == victim:
            # It was handed the lock (alive) just before the kill: a holder killed, which
            # keeps the lock to its TTL like any other (its log may not show it yet).
            holders_killed.append(time.monotonic())
        spawn()
    stop_file.touch()
    with mutex:
        running = list(alive.values())
    for process in running:
        assert process.wait(timeout=60) == 0
    elapsed = time.monotonic() - started

    intervals: list[Interval] = []
    killed_holding = 0
    for log in logs:
        lines = log_lines(log)
        if not lines:
            continue  # killed before it wrote a line
        pid = lines[0][1]
        start: float | None = None
        for fields in lines[1:]:
            if fields[0] == "S":
                start = int(fields[1]) / 1e9
            elif fields[0] == "E" and start is not None:
                intervals.append(Interval(start, int(fields[1]) / 1e9, pid))
                start = None
        if start is not None:  # killed while holding (it became the holder meanwhile)
            killed_holding += 1
            intervals.append(Interval(start, start + TTL - 0.25, pid, how="killed"))
    intervals.sort(key=lambda i: i.start)
    pauses = [
        (earlier.end, later.start)
        for earlier, later in itertools.pairwise(intervals)
        if earlier.how != "killed"  # a killed *holder* keeps the lock to its TTL, rightly
    ]
    kill_times = [at for _, at in kills]
    stalls = []  # (pause, waiters killed in the lease before it)
    # Pauses during which a process that had just become the holder died, with the waiters
    # killed meanwhile: the killer goes on during the TTL, and once the holder's TTL is over
    # each of them may be handed the lock in turn for a window.
    holder_stalls = []
    for begin, end in pauses:
        if any(begin <= at <= end for at in holders_killed):
            dead = sum(
                1
                for at in kill_times
                if begin <= at <= end and not any(abs(at - h) < 0.2 for h in holders_killed)
            )
            holder_stalls.append((round(end - begin, 3), dead))
        elif end - begin >= LONG:
            dead = sum(1 for at in kill_times if begin - WAITER_LEASE_SECONDS <= at <= end)
            stalls.append((round(end - begin, 3), dead))
    longest = max([stall for stall, _ in stalls] or [0.0])
    overlaps = overlapping_pairs(intervals)
    figures.update(
        ttl_s=TTL,
        workers=WORKERS,
        seconds=round(elapsed, 1),
        kills=len(kills),
        killed_while_holding=killed_holding,
        killed_just_after_becoming_the_holder=len(holders_killed),
        stalls_from_killed_holders_s_and_dead_waiters=holder_stalls,
        holds=len(intervals),
        window_s=WINDOW,
        stalls_s_and_dead_waiters=stalls,
        longest_stall_from_dead_waiters_s=round(longest, 3),
        median_pause_ms=round(sorted(e - b for b, e in pauses)[len(pauses) // 2] * 1000, 3),
        overlapping_intervals=len(overlaps),
    )
    assert len(kills) >= KILLS // 2, "the killer caught too few waiters"
    assert not overlaps, f"overlapping holds: {overlaps[:5]}"
    for stall, dead in stalls:
        assert stall <= dead * WAITER_LEASE_SECONDS + SLACK, (
            f"a {stall} s stall with {dead} dead waiters"
        )
    assert longest < TTL * 0.8
    for stall, dead in holder_stalls:
        assert stall <= TTL + dead * WAITER_LEASE_SECONDS + SLACK, (
            f"a {stall} s stall after a killed holder, with {dead} waiters killed meanwhile"
        )

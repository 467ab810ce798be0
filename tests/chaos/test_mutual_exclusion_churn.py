"""Scenario 1: mutual exclusion under churn, with lock holders killed by SIGKILL.

Worker processes (``increment`` jobs) make read-modify-write increments of one counter, each
under the lock, and log their hold intervals on the monotonic clock. A killer thread looks up
the lock's current holder (its pid is in the hold's metadata) at random moments and SIGKILLs
it; the worker's slot is taken over by a new process that does the rest of its share.

Pass rule:

- the counter is exact for the completed sections: each section writes ``counter + 1`` and
  appends its id to a list in one MULTI/EXEC, so Redis knows which sections completed, and
  the counter equals their number (a killed holder's section may be lost, never doubled);
- the completed sections' fences, in the order they were written, strictly increase;
- a sweep over the logged hold intervals finds no two that overlap. A killed holder's interval
  lasts until its TTL, minus ``GRACE``: the log line comes a little after the grant, and the
  TTL runs from the grant.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from django_redis_locks.core import Backend
from django_redis_locks.core.protocol.replies import text
from django_redis_locks.inspection import get_lock
from tests.chaos.processes import Processes, worker_command
from tests.chaos.sweep import Interval, log_lines, overlapping_pairs
from tests.harness.acl import unrestricted_url

TTL = 1.5
#: Latency allowed between a grant and its log line: a killed holder's interval is taken to
#: end this long before ``start + TTL``. A woken waiter logs after its wake-up is delivered
#: and the process scheduled, which takes milliseconds even on a busy 2-core machine.
GRACE = 0.25
WORK = 0.0005  # seconds between the read and the write of each increment


@dataclass
class Slot:
    """One worker's share of the increments, done by one process or, after kills, several."""

    index: int
    share: int
    logs: list[Path] = field(default_factory=list)
    process: subprocess.Popen[str] | None = None
    started: int = 0  # sections logged as held by the processes that ended so far


@dataclass
class Kill:
    pid: int
    at: float


def _started_sections(log: Path) -> int:
    return sum(1 for fields in log_lines(log) if fields[0] == "S")


@pytest.mark.parametrize(
    ("workers", "share", "kills", "seconds"),
    [
        pytest.param(
            16, 250, 10, 240, marks=[pytest.mark.chaos, pytest.mark.timeout(300)], id="16x250"
        ),
        pytest.param(
            64, 1000, 40, 1500, marks=[pytest.mark.slow, pytest.mark.timeout(1560)], id="64x1000"
        ),
    ],
)
def test_sigkilled_holders_never_double_an_increment_nor_overlap_another_hold(
    processes: Processes,
    redis_server: Any,
    redis_client: redis.Redis,
    namespace: str,
    tmp_path: Path,
    figures: dict[str, Any],
    rng: random.Random,
    workers: int,
    share: int,
    kills: int,
    seconds: float,
) -> None:
    name, counter, done = "counter", f"{namespace}:counter", f"{namespace}:done"
    slots = [Slot(index, share) for index in range(workers)]
    alive: dict[int, Slot] = {}
    mutex = threading.Lock()

    def spawn(slot: Slot) -> None:
        log = tmp_path / f"worker-{slot.index}-{len(slot.logs)}.log"
        slot.logs.append(log)
        command = worker_command(
            "increment",
            url=redis_server.url,
            data_url=unrestricted_url(redis_server.url),
            namespace=namespace,
            name=name,
            ttl=TTL,
            counter=counter,
            done=done,
            sections=slot.share - slot.started,
            first=slot.started,
            work=WORK,
            log=log,
            who=f"w{slot.index}",
        )
        slot.process = processes.start(command, stderr=subprocess.PIPE)
        with mutex:
            alive[slot.process.pid] = slot

    killed: list[Kill] = []
    stop = threading.Event()
    backend = Backend(redis_client, namespace=namespace)

    def killer() -> None:
        while not stop.is_set() and len(killed) < kills:
            stop.wait(rng.uniform(0.1, 0.6))  # a random pause between two kills
            holder = get_lock(name, client=backend)
            with mutex:
                if holder is None or holder.pid not in alive:
                    continue
                try:
                    os.kill(holder.pid, signal.SIGKILL)
                except ProcessLookupError:
                    # It ended, and was reaped by the main loop's wait(), after its last
                    # hold was read; the loop removes it from ``alive`` next.
                    continue
                killed.append(Kill(holder.pid, time.monotonic()))

    started_at = time.monotonic()
    for slot in slots:
        spawn(slot)
    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    deadline = started_at + seconds
    running = list(slots)
    try:
        while running:
            assert time.monotonic() < deadline, "the workers did not finish in time"
            slot = running.pop(0)
            assert slot.process is not None
            try:
                code = slot.process.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                running.append(slot)
                continue
            with mutex:
                del alive[slot.process.pid]
            slot.started += _started_sections(slot.logs[-1])
            if code == -signal.SIGKILL and slot.started < slot.share:
                spawn(slot)  # a new process does the rest of the killed one's share
                running.append(slot)
            elif code != -signal.SIGKILL:
                stderr = slot.process.stderr.read() if slot.process.stderr else ""
                assert code == 0, f"worker {slot.index} failed ({code}): {stderr}"
    finally:
        stop.set()
        thread.join(timeout=10)
    elapsed = time.monotonic() - started_at

    killed_pids = {kill.pid for kill in killed}
    intervals: list[Interval] = []
    sections_held: dict[str, int] = {}  # section id -> fence, for every logged hold
    ended: set[str] = set()
    lost_on_release = 0
    cut_short: list[str] = []  # sections whose holder was killed while holding
    for slot in slots:
        for log in slot.logs:
            lines = log_lines(log)
            pid = int(lines[0][1])
            start: tuple[float, int, str] | None = None
            for fields in lines[1:]:
                if fields[0] == "S":
                    start = (int(fields[1]) / 1e9, int(fields[2]), fields[3])
                    sections_held[fields[3]] = int(fields[2])
                elif fields[0] == "E":
                    assert start is not None
                    intervals.append(Interval(start[0], int(fields[1]) / 1e9, str(pid), start[1]))
                    ended.add(start[2])
                    start = None
                elif fields[0] == "L":
                    lost_on_release += 1
            if start is not None:  # held when the process died
                assert pid in killed_pids, f"worker {pid} ended while holding, unkilled"
                intervals.append(
                    Interval(start[0], start[0] + TTL - GRACE, str(pid), start[1], "killed")
                )
                cut_short.append(start[2])

    completed = [text(entry) for entry in redis_client.lrange(done, 0, -1)]
    completed_ids = [entry.rpartition(":")[0] for entry in completed]
    completed_fences = [int(entry.rpartition(":")[2]) for entry in completed]
    value = int(redis_client.get(counter) or 0)
    overlaps = overlapping_pairs(intervals)
    comebacks = []
    starts = sorted(interval.start for interval in intervals)
    for interval in intervals:
        if interval.how == "killed":
            later = [s for s in starts if s > interval.start]
            if later:
                comebacks.append(later[0] - interval.start)
    lost = set(sections_held) - set(completed_ids)
    figures.update(
        workers=workers,
        share=share,
        ttl_s=TTL,
        grace_s=GRACE,
        seconds=round(elapsed, 1),
        kills=len(killed),
        killed_while_holding=len(cut_short),
        sections_started=len(sections_held),
        sections_completed=len(completed),
        sections_lost=len(lost),
        counter=value,
        overlapping_intervals=len(overlaps),
        releases_that_found_the_hold_lost=lost_on_release,
        lock_back_after_a_kill_s=[round(c, 3) for c in sorted(comebacks)],
    )
    assert len(sections_held) == workers * share  # every increment was attempted once
    assert value == len(completed), "an increment was lost: two holders overlapped"
    assert len(set(completed_ids)) == len(completed_ids), "a section was written twice"
    assert set(completed_ids) <= set(sections_held)
    assert ended <= set(completed_ids), "a section that ended is missing from the list"
    assert lost <= set(cut_short), "a section was lost without its holder being killed"
    assert all(b > a for a, b in itertools.pairwise(completed_fences))
    assert not overlaps, f"overlapping holds: {overlaps[:5]}"
    assert lost_on_release == 0, "a live holder stalled past its TTL (an overloaded machine?)"
    assert all(c >= TTL - GRACE for c in comebacks)
    assert killed, "the killer never caught a holder"

"""Scenario 8: a semaphore under churn, with holders killed (SIGKILL) or stopped (SIGSTOP, for
twice the TTL) at random, a third of the workers an hour ahead and a third an hour behind
(``faketime``).

Workers (``sem-churn`` jobs) log each hold on the Redis server's clock, the one clock all of
them share whatever their own says. A fault thread picks a random current holder (pid from
the semaphore's holder list) and kills or stops it; a killed worker's share is done by a new
process; a stopped one is continued and must find its slot gone.

Pass rule: a sweep over the hold intervals never finds more than ``LIMIT`` holders at once
(a killed or stopped holder's interval lasts until its TTL minus ``GRACE``, the latency
between the grant and the log line; a hold whose process was stopped before it could log its
start is left out, see ``sound``); no hold caught by a stop ends in a successful release
(it gets ``LockLost``, or is killed before it could release), and only stopped workers see
``LockLost``; the slot of each faulted hold comes back (``LIMIT`` others live at once) within
a second of its TTL; at the end nothing is held and the semaphore's keys are gone.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from django_redis_locks.core import Backend, Semaphore
from django_redis_locks.core.protocol.constants import HOT_LONG_MS
from tests.chaos.processes import Processes, worker_command
from tests.chaos.sweep import Interval, first_time_at, log_lines, peak_concurrency
from tests.helpers import only_recent_releases

pytestmark = pytest.mark.chaos

LIMIT = 3
TTL = 1.0
GRACE = 0.2
WORKERS = 12
SHARE = 120
WORK = 0.01
FAULTS = ["kill"] * 3 + ["stop"] * 3
STOP_FOR = 2 * TTL
SKEWS = ["", "+1h", "-1h"]  # worker i runs with SKEWS[i % 3]


@dataclass
class Slot:
    index: int
    skew: str
    logs: list[Path] = field(default_factory=list)
    process: subprocess.Popen[str] | None = None
    started: int = 0

    def pid(self) -> int | None:
        """The current worker's own pid (faketime runs it as a child of its own)."""
        lines = log_lines(self.logs[-1]) if self.logs else []
        return int(lines[0][1]) if lines and lines[0][0] == "P" else None


@dataclass
class Fault:
    action: str
    pid: int
    at: float  # server time


def holds_of(log: Path) -> tuple[int, list[Interval]]:
    """Every hold the log shows, however it ended (see ``sound`` for which the sweep uses)."""
    lines = log_lines(log)
    pid = int(lines[0][1])
    holds: list[Interval] = []
    start = end = None
    for fields in lines[1:]:
        if fields[0] == "S":
            start, end = int(fields[1]) / 1e9, None
        elif fields[0] == "E":
            end = int(fields[1]) / 1e9
        elif fields[0] in ("R", "L"):
            assert start is not None and end is not None
            if fields[0] == "R":
                holds.append(Interval(start, end, str(pid)))
            else:
                holds.append(Interval(start, min(end, start + TTL - GRACE), str(pid), how="lost"))
            start = end = None
    if start is not None:  # killed while holding (before or after its last E)
        last = start + TTL - GRACE if end is None else min(end, start + TTL - GRACE)
        holds.append(Interval(start, last, str(pid), how="killed"))
    return pid, holds


def sound(hold: Interval, stops: list[Fault]) -> bool:
    """Whether the logged interval surely lies inside the real hold.

    A released hold's does: the release found the slot still held. A stopped process may
    have been stopped after ``acquire()`` returned and before it logged ``S`` (then ``S``
    comes after the hold ran out): a hold lost on release counts only if the stop came after
    its ``S``, and a killed one only if its process was not stopped shortly before ``S``.
    """
    mine = [stop.at for stop in stops if str(stop.pid) == hold.who]
    if hold.how == "lost":
        return any(hold.start < at < hold.start + TTL for at in mine)
    if hold.how == "killed":
        return not any(hold.start - STOP_FOR - TTL <= at <= hold.start for at in mine)
    return True


@pytest.mark.timeout(240)
def test_semaphore_churn_with_killed_stopped_and_skewed_holders_never_exceeds_the_limit(
    processes: Processes,
    make_server: Any,
    tmp_path: Path,
    figures: dict[str, Any],
    rng: random.Random,
) -> None:
    if shutil.which("faketime") is None:
        pytest.skip("needs faketime (Debian package 'faketime', installed by .ci/run)")
    server = make_server()
    client = server.client(socket_timeout=5)
    backend = Backend(client, namespace="churn")
    semaphore = Semaphore("churn", LIMIT, client=backend, timeout=TTL)
    slots = [Slot(index, SKEWS[index % len(SKEWS)]) for index in range(WORKERS)]
    mutex = threading.Lock()

    def server_now() -> float:
        seconds, micros = client.time()
        return int(seconds) + int(micros) / 1e6

    def spawn(slot: Slot) -> None:
        log = tmp_path / f"worker-{slot.index}-{len(slot.logs)}.log"
        command = worker_command(
            "sem-churn",
            url=server.url,
            namespace="churn",
            name="churn",
            limit=LIMIT,
            ttl=TTL,
            acquisitions=SHARE - slot.started,
            work=WORK,
            log=log,
        )
        prefix = ["faketime", "-f", slot.skew] if slot.skew else []
        with mutex:
            slot.logs.append(log)
            slot.process = processes.start(command, prefix, stderr=subprocess.PIPE)

    def started() -> int:
        return sum(1 for slot in slots for log in slot.logs for f in log_lines(log) if f[0] == "S")

    faults: list[Fault] = []
    stopped: set[int] = set()
    timers: list[threading.Timer] = []
    done = threading.Event()

    def continue_(pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        with mutex:
            stopped.discard(pid)

    def injector() -> None:
        plan = rng.sample(FAULTS, len(FAULTS))
        while plan and not done.wait(rng.uniform(0.1, 0.5)):  # a random pause between faults
            if started() > WORKERS * SHARE * 0.6:
                return  # faults early only: waiters remain to take the slots back
            with mutex:
                running = {slot.pid() for slot in slots if slot.process is not None}
                running -= stopped
            candidates = [h.pid for h in semaphore.holders() if h.pid and h.pid in running]
            if not candidates:
                continue
            pid, action = rng.choice(candidates), plan[-1]
            try:
                os.kill(pid, signal.SIGKILL if action == "kill" else signal.SIGSTOP)
            except ProcessLookupError:
                continue  # it ended its share since it was listed
            plan.pop()
            faults.append(Fault(action, pid, server_now()))
            if action == "stop":
                with mutex:
                    stopped.add(pid)
                timer = threading.Timer(STOP_FOR, continue_, (pid,))  # the stop's length
                timers.append(timer)
                timer.start()

    for slot in slots:
        spawn(slot)
    thread = threading.Thread(target=injector, daemon=True)
    thread.start()
    try:
        running = list(slots)
        while running:
            slot = running.pop(0)
            assert slot.process is not None
            try:
                code = slot.process.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                running.append(slot)
                continue
            pid = slot.pid()
            slot.started += sum(1 for f in log_lines(slot.logs[-1]) if f[0] == "S")
            with mutex:
                was_killed = any(f.pid == pid and f.action == "kill" for f in faults)
            if was_killed:
                if slot.started < SHARE:
                    spawn(slot)  # a new process does the rest of the killed one's share
                    running.append(slot)
            else:
                stderr = slot.process.stderr.read() if slot.process.stderr else ""
                assert code == 0, f"worker {slot.index} failed ({code}): {stderr}"
    finally:
        done.set()
        thread.join(timeout=10)
        for timer in timers:
            timer.join(timeout=STOP_FOR + 1)
        for slot in slots:  # faketime's child outlives its parent: end workers by their pid
            for log in slot.logs:
                lines = log_lines(log)
                if lines and lines[0][0] == "P":
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(lines[0][1]), signal.SIGKILL)

    logged: list[Interval] = []
    for slot in slots:
        for log in slot.logs:
            logged += holds_of(log)[1]
    stops = [f for f in faults if f.action == "stop"]
    intervals = [hold for hold in logged if sound(hold, stops)]
    peak = peak_concurrency(intervals)
    stopped_pids = {f.pid for f in stops}
    lost = [i for i in logged if i.how == "lost"]
    caught = []  # the holds in progress when their process was stopped
    for fault in faults:
        if fault.action == "stop":
            caught += [
                i for i in intervals if i.who == str(fault.pid) and i.start < fault.at < i.end
            ]
    reclaims: list[float] = []
    isolated: list[float] = []
    faulted = [i for i in intervals if i.how != "released"]
    for hold in faulted:
        others = [i for i in intervals if i is not hold]
        back = first_time_at(others, LIMIT, after=hold.start)
        delay = (back if back is not None else float("inf")) - (hold.start + TTL)
        reclaims.append(delay)
        if not any(o is not hold and abs(o.start - hold.start) < TTL + 1 for o in faulted):
            isolated.append(delay)
    left = semaphore.count()
    keys_left = sorted(
        k.decode()
        for k in client.keys("churn:*")
        if b"reg:" not in k
        and not only_recent_releases(client, k)
        # (the contention figures stay by design, at most two hours: lib/hot)
        and not (k.endswith(b":hot") and 0 < client.pttl(k) <= 2 * HOT_LONG_MS)
    )
    figures.update(
        limit=LIMIT,
        ttl_s=TTL,
        grace_s=GRACE,
        workers=WORKERS,
        skews=SKEWS,
        holds=len(logged),
        holds_left_out_of_the_sweep=len(logged) - len(intervals),
        faults=[f.action for f in faults],
        killed_holds=sum(1 for i in intervals if i.how == "killed"),
        stopped_holds=len(caught),
        lost_on_release=len(lost),
        peak_concurrency=peak,
        slot_back_after_ttl_s=[round(d, 3) for d in sorted(reclaims)],
        fault_log=[(f.action, f.pid, round(f.at, 3)) for f in faults],
        caught_by_stops=[(i.who, round(i.start, 3), round(i.end, 3), i.how) for i in caught],
        held_at_the_end=left,
        keys_left=keys_left,
    )
    backend.close()
    client.close()
    assert peak <= LIMIT, f"{peak} holders at once"
    assert peak == LIMIT  # the churn did fill every slot
    assert len(logged) == WORKERS * SHARE  # every hold logged once, however it ended
    assert all(hold.how != "released" for hold in logged if hold not in intervals)
    assert len(faults) >= len(FAULTS) - 1, f"only {len(faults)} faults were injected"
    assert all(i.who in {str(p) for p in stopped_pids} for i in lost)
    # (lost on release, or killed after it was continued, before it could release)
    assert all(i.how != "released" for i in caught), "a stopped holder released a lost slot"
    assert all(d <= 1.0 for d in isolated), "a faulted holder's slot did not come back"
    assert left == 0 and not keys_left

"""A run's histories shared by worker processes, each with its own private redis-server.

A history depends only on its seed and a flushed server, so a run may deal its seeds to
several processes (seed ``s`` goes to worker ``s % jobs``) and add up what they report; the
failing seeds are replayed and shrunk afterwards by the caller, on its own server.
``DRL_SIM_JOBS`` sets how many (see :func:`default_jobs`).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from collections import Counter
from dataclasses import dataclass, field

from tests.harness.servers import RedisServer

from .config import SimConfig
from .faults import FaultLog
from .shrink import run_history

#: A worker prints a progress line (with -s) every this many histories.
PROGRESS_EVERY = 5000


@dataclass
class Tally:
    """What a share of a run found: steps, faults by kind, violations by invariant, and the
    failing seeds in the order they ran."""

    histories: int = 0
    steps: int = 0
    faults: FaultLog = field(default_factory=FaultLog)
    violations: Counter[str] = field(default_factory=Counter)
    failed: list[int] = field(default_factory=list)
    error: str = ""

    def add(self, other: Tally) -> None:
        self.histories += other.histories
        self.steps += other.steps
        self.faults.update(other.faults)
        self.violations.update(other.violations)
        self.failed.extend(other.failed)
        self.error = self.error or other.error


def default_jobs() -> int:
    """DRL_SIM_JOBS; else one per core (at most 2), or 1 in a worker of a parallel test run
    (bin/test), where the other workers' tests need the other core."""
    value = os.environ.get("DRL_SIM_JOBS", "").strip()
    if value:
        return max(1, int(value))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return 1
    return max(1, min(2, os.cpu_count() or 1))


def run_share(seeds: range, steps_each: int, cluster: bool | None, worker: int = 0) -> Tally:
    """Run ``seeds`` on a private server of this process's own."""
    tally = Tally()
    server = RedisServer()
    server.start()
    try:
        with server.client(socket_timeout=10) as client:
            for done, seed in enumerate(seeds, 1):
                history = run_history(client, SimConfig.draw(seed, steps_each, cluster))
                tally.histories += 1
                tally.steps += history.steps
                tally.faults.update(history.faults)
                if history.failed:
                    tally.violations[history.violations[0].split(":", 1)[0]] += 1
                    tally.failed.append(seed)
                if done % PROGRESS_EVERY == 0:
                    print(
                        f"simulation worker {worker}: {done} of {len(seeds)} histories, "
                        f"failing seeds so far: {tally.failed[:10]}",
                        flush=True,
                    )
    finally:
        server.stop()
    return tally


def _worker(
    results: multiprocessing.Queue[tuple[int, Tally]],
    worker: int,
    seeds: range,
    steps_each: int,
    cluster: bool | None,
) -> None:
    try:
        tally = run_share(seeds, steps_each, cluster, worker)
    except BaseException as exc:  # reported to the parent, which fails the run with it
        tally = Tally(error=f"worker {worker}: {type(exc).__name__}: {exc}")
    results.put((worker, tally))


def run_seeds(
    first: int, count: int, steps_each: int, cluster: bool | None, jobs: int, timeout: float
) -> Tally:
    """Run seeds ``first`` to ``first + count - 1`` in ``jobs`` processes and add them up.
    The failing seeds come back in seed order."""
    total = Tally()
    if jobs <= 1 or count < 2:
        total.add(run_share(range(first, first + count), steps_each, cluster))
        return total
    context = multiprocessing.get_context("spawn")  # no inherited threads, sockets or servers
    results: multiprocessing.Queue[tuple[int, Tally]] = context.Queue()
    workers = [
        context.Process(
            target=_worker,
            args=(results, n, range(first + n, first + count, jobs), steps_each, cluster),
            daemon=True,
        )
        for n in range(jobs)
    ]
    for process in workers:
        process.start()
    deadline = time.monotonic() + timeout
    try:
        for _ in workers:
            try:
                _, tally = results.get(timeout=max(1.0, deadline - time.monotonic()))
            except queue.Empty:
                total.error = total.error or f"the workers did not finish within {timeout:.0f} s"
                break
            total.add(tally)
    finally:
        for process in workers:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join(timeout=10)
    total.failed.sort()
    return total

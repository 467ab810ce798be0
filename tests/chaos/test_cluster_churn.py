"""Scenario 14: churn on a three-master Redis Cluster (no replicas), the lock handed over across
nodes, holders killed by SIGKILL.

Worker processes (:mod:`tests.chaos.cluster_workers`), each with a Backend on a cluster client
of its own, contend on a set of names whose keys live on every master: locks, semaphores of
limit 1 and semaphores of limit 2. Each process hears its wake-ups on the node serving its own
channel, so most hand-overs cross nodes: the release script runs on the name's node, the
waiter's subscription is on another. Acquires block, so releases hand the name to queued
waiters; holds are short (tens of ms) or, 30 % of the time, longer than the confirmation
window of a hand-over (1 s), which a waiter granted that window only, while told the full
TTL, would outlive. A killer SIGKILLs holders mid-hold (their pid is in the hold's metadata);
a new process takes each one's place.

Each worker logs its holds on the machine's monotonic clock: from after the acquire returned to
before the release was sent, so a logged interval lies inside the real hold. A killed holder's
interval lasts until its TTL, minus ``GRACE``. A hold counts as handed over when its process
was already waiting when another process released the name, and got it within ``HANDED``
after that release; it crossed nodes when the waiter's channel hashes to a slot of another
master than the name's keys (from the cluster's slot map).

After the churn, the newcomer check of ``tests/core/test_cluster_handover.py`` on fresh names
(two on each master, for each kind): H holds, W blocks, H releases, W returns holding, and
1.5 s later a newcomer's ``acquire(blocking=False)`` must fail (TTLs 30 s).

Pass rule: no two holds of a lock or of a limit-1 semaphore overlap, never more than two holds
of a limit-2 semaphore at once; no release finds its hold lost, no call fails; every kind had
hand-overs across nodes, some of them held past the confirmation window; holders were killed
mid-hold; every newcomer is refused.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from django_redis_locks.core import Backend, Semaphore
from django_redis_locks.core.protocol.keys import KeySpace
from django_redis_locks.core.protocol.lock_calls import HANDOVER_WINDOW_MS
from django_redis_locks.inspection import get_lock
from tests.chaos.processes import Processes
from tests.chaos.sweep import Interval, log_lines, overlapping_pairs, peak_concurrency
from tests.core.test_cluster_handover import (
    address,
    names_per_node,
    newcomer_check,
    node_of,
    refused_everywhere,
    subscribed_at,
)
from tests.harness.plugin import MakeCluster
from tests.harness.servers import RedisCluster

pytestmark = pytest.mark.chaos

TTL = 2.5
GRACE = 0.25  # latency between a grant and its log line (see scenario 1)
WINDOW = HANDOVER_WINDOW_MS / 1000
#: A hold is a hand-over when it began within this long after another process's release of
#: the name, for which its process was already waiting.
HANDED = 0.3
WORKERS = 14
CHURN = 18.0  # seconds of churn, from when every first worker listens
KILLS = 6
SHORT = (0.01, 0.08)  # seconds of work of a short hold
LONG = (1.2, 1.6)  # of a long hold: past the window, well inside the TTL
LONG_SHARE = 0.3
#: kind -> its limit (0: a lock), and how often a worker picks each of its names (one name on
#: each master): a limit-2 semaphore hands over only with three processes or more on a name
KINDS = {"lock": (0, 1.0), "semaphore-1": (1, 1.0), "semaphore-2": (2, 2.0)}


@dataclass
class Hold:
    who: int  # pid
    name: str
    asked: float  # when its acquire began
    start: float
    end: float | None = None  # before the release
    how: str = "released"  # released, lost (the release found it lost), killed


@dataclass
class Worker:
    log: Path
    process: subprocess.Popen[str]
    channel: str = ""
    holds: list[Hold] = field(default_factory=list)
    timeouts: int = 0
    failures: list[str] = field(default_factory=list)


def read_log(worker: Worker, killed: bool) -> None:
    """Fill ``worker`` from its log; a hold without an end is a killed holder's."""
    lines = log_lines(worker.log)
    pid = int(lines[0][1]) if lines else worker.process.pid
    asked: dict[str, float] = {}
    for fields in lines[1:]:
        kind = fields[0]
        if kind == "C":
            worker.channel = fields[1]
        elif kind == "A":
            asked[fields[2]] = int(fields[1]) / 1e9
        elif kind == "S":
            worker.holds.append(Hold(pid, fields[2], asked[fields[2]], int(fields[1]) / 1e9))
        elif kind == "E":
            worker.holds[-1].end = int(fields[1]) / 1e9
        elif kind == "L":
            worker.holds[-1].how = "lost"
        elif kind == "T":
            worker.timeouts += 1
        elif kind == "F":
            worker.failures.append(" ".join(fields[2:]))
    last = worker.holds[-1] if worker.holds else None
    if last is not None and last.end is None:
        assert killed, f"worker {pid} ended while holding {last.name}, unkilled"
        last.how = "killed"
        last.end = last.start + TTL - GRACE


def test_cluster_churn_hands_over_across_nodes_and_never_overlaps(
    processes: Processes,
    make_cluster: MakeCluster,
    namespace: str,
    tmp_path: Path,
    figures: dict[str, Any],
    rng: random.Random,
) -> None:
    cluster: RedisCluster = make_cluster(3)
    owners = cluster.slot_owners()
    keys = KeySpace(namespace)
    limits: dict[str, int] = {}  # name -> limit
    kinds: dict[str, str] = {}  # name -> kind
    weights: dict[str, float] = {}  # name -> how often a worker picks it
    for kind, (limit, weight) in KINDS.items():
        for name in names_per_node(cluster, namespace, kind, 1):
            limits[name], kinds[name], weights[name] = limit, kind, weight
    name_node = {name: address(node_of(owners, keys.lock(name).lock)) for name in limits}
    targets = json.dumps([(name, limits[name], weights[name]) for name in sorted(limits)])
    stop_file = tmp_path / "stop"
    workers: dict[int, Worker] = {}  # pid -> worker
    mutex = threading.Lock()

    def spawn() -> None:
        log = tmp_path / f"worker-{len(workers)}.log"
        command = [
            *(sys.executable, "-m", "tests.chaos.cluster_workers"),
            *("--url", cluster.url, "--namespace", namespace, "--targets", targets),
            *("--ttl", str(TTL), "--long-share", str(LONG_SHARE)),
            *("--short", ",".join(map(str, SHORT)), "--long", ",".join(map(str, LONG))),
            *("--acquire-wait", "4", "--seed", str(rng.randrange(1 << 32))),
            *("--log", str(log), "--stop-file", str(stop_file)),
        ]
        process = processes.start(command, stderr=subprocess.PIPE)
        with mutex:
            workers[process.pid] = Worker(log, process)

    for _ in range(WORKERS):
        spawn()
    startup = time.monotonic() + 60
    while not all(any(f[0] == "C" for f in log_lines(w.log)) for w in list(workers.values())):
        for worker in workers.values():
            code = worker.process.poll()
            assert code is None, worker.process.stderr.read() if worker.process.stderr else code
        assert time.monotonic() < startup, "the workers did not start listening"
        time.sleep(0.1)  # the logs are read again, not a wait for one event

    # Each process listens on the node the slot map gives for its channel.
    for worker in workers.values():
        channel = next(f[1] for f in log_lines(worker.log) if f[0] == "C")
        where = address(node_of(owners, channel))
        assert subscribed_at(cluster, channel) == [where], f"{channel} is not on {where}"

    client = cluster.client(socket_timeout=5)  # the test's inspection: unrestricted
    backend = Backend(client, namespace=namespace)
    killed: dict[int, float] = {}  # pid -> when
    done = threading.Event()

    def holder_pids(name: str) -> list[int]:
        if limits[name] == 0:
            info = get_lock(name, client=backend)
            return [info.pid] if info is not None and info.pid is not None else []
        semaphore = Semaphore(name, limits[name], client=backend)
        return [h.pid for h in semaphore.holders() if h.pid is not None]

    def killer() -> None:
        while len(killed) < KILLS and not done.wait(rng.uniform(0.8, 2.2)):
            with mutex:
                live = {pid for pid, w in workers.items() if w.process.poll() is None}
                holding = {pid for name in limits for pid in holder_pids(name)}
                candidates = sorted(holding & live)
                if not candidates:
                    continue
                victim = rng.choice(candidates)
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                killed[victim] = time.monotonic()
            workers[victim].process.wait(timeout=10)
            spawn()  # a new process takes the killed one's place

    started = time.monotonic()
    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        time.sleep(CHURN * 0.8)  # the churn, with kills
        done.set()
        thread.join(timeout=15)
        time.sleep(CHURN * 0.2)  # the rest, without kills: the killed holders' names come back
    finally:
        done.set()
        stop_file.touch()
    for pid, worker in list(workers.items()):
        if pid in killed:
            continue
        code = worker.process.wait(timeout=30)
        stderr = worker.process.stderr.read() if worker.process.stderr else ""
        assert code == 0, f"worker {pid} failed ({code}): {stderr}"
    elapsed = time.monotonic() - started
    backend.close()
    client.close()

    # The newcomer check, on names of its own (two on each master, for each kind).
    made: list[Any] = []

    def make_backend() -> Backend:
        made_client = cluster.library_client(socket_timeout=5)
        made.append(made_client)
        return Backend(made_client, namespace=namespace)

    checked: list[tuple[str, int]] = []
    for kind, (limit, _) in KINDS.items():
        checked += [(n, limit) for n in names_per_node(cluster, namespace, f"new-{kind}", 2)]
    try:
        newcomers = newcomer_check(cluster, make_backend, namespace, checked)
    finally:
        for made_client in made:
            made_client.close()

    # The figures.
    for pid, worker in workers.items():
        read_log(worker, pid in killed)
    channel_node = {
        pid: address(node_of(owners, w.channel)) for pid, w in workers.items() if w.channel
    }
    holds = [hold for worker in workers.values() for hold in worker.holds]
    by_name: dict[str, list[Hold]] = {}
    for hold in holds:
        by_name.setdefault(hold.name, []).append(hold)
    per_kind: dict[str, Counter[str]] = {kind: Counter() for kind in KINDS}
    problems: dict[str, list[str]] = {kind: [] for kind in KINDS}
    for name, name_holds in by_name.items():
        figures_of = per_kind[kinds[name]]
        limit = limits[name]
        intervals = [Interval(h.start, h.end or h.start, str(h.who), how=h.how) for h in name_holds]
        releases = [h for h in name_holds if h.how != "killed"]
        for hold in name_holds:
            figures_of["holds"] += 1
            figures_of["killed_while_holding"] += hold.how == "killed"
            figures_of["lost_on_release"] += hold.how == "lost"
            handed = [
                r
                for r in releases
                if r.who != hold.who and r.end is not None and hold.asked < r.end <= hold.start
            ]
            if not handed or hold.start - max(r.end or 0 for r in handed) > HANDED:
                continue
            figures_of["handovers"] += 1
            if channel_node[hold.who] != name_node[name]:
                figures_of["cross_node_handovers"] += 1
                if (hold.end or hold.start) - hold.start > WINDOW:
                    figures_of["cross_node_handovers_held_past_the_window"] += 1
        if limit <= 1:
            pairs = overlapping_pairs(intervals)
            figures_of["overlapping_intervals"] += len(pairs)
            if pairs:
                problems[kinds[name]].append(
                    f"{name} (on {name_node[name]}): {len(pairs)} overlapping holds, first "
                    f"{[(p.who, round(p.start, 3), round(p.end, 3), p.how) for p in pairs[0]]}"
                )
        else:
            peak = peak_concurrency(intervals)
            figures_of["peak_concurrency"] = max(figures_of["peak_concurrency"], peak)
            if peak > limit:
                problems[kinds[name]].append(f"{name} (on {name_node[name]}): {peak} at once")
    figures.update(
        server=str(cluster.binary),
        masters=3,
        ttl_s=TTL,
        grace_s=GRACE,
        window_s=WINDOW,
        workers=WORKERS,
        processes=len(workers),
        seconds=round(elapsed, 1),
        names={kind: sorted(n for n in limits if kinds[n] == kind) for kind in KINDS},
        names_per_master=Counter(name_node.values()),
        processes_per_subscription_master=Counter(channel_node.values()),
        kills=len(killed),
        timeouts=sum(w.timeouts for w in workers.values()),
        failed_calls=[f for w in workers.values() for f in w.failures],
        kinds={kind: dict(values) for kind, values in per_kind.items()},
        problems=problems,
        newcomer_check=[o.summary() for o in newcomers],
        newcomers_admitted=[o.name for o in newcomers if o.newcomer_admitted],
    )

    wrong = {kind: found for kind, found in problems.items() if found}
    assert not wrong, f"more holders than the limit: {wrong}"
    refused = refused_everywhere(newcomers)
    assert not refused, "\n".join(refused)
    assert not figures["failed_calls"]
    for kind, values in per_kind.items():
        assert values["lost_on_release"] == 0, f"{kind}: a release found its hold lost"
        assert values["cross_node_handovers"] >= 3, f"{kind}: too few hand-overs across nodes"
    past = sum(v["cross_node_handovers_held_past_the_window"] for v in per_kind.values())
    assert past >= 5, "too few holds handed over across nodes outlived the window"
    assert sum(o.cross_node for o in newcomers) == 2 * 2 * len(KINDS)
    assert len(killed) >= KILLS // 2, "the killer caught too few holders"
    assert sum(v["killed_while_holding"] for v in per_kind.values()) >= 1

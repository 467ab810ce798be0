"""The Semaphore across real processes: churn with SIGKILLed holders, paused holders, skewed
clocks. Workers are ``tests.core.sem_workers`` jobs."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from django_redis_locks import Semaphore
from django_redis_locks.core import Backend

ROOT = Path(__file__).resolve().parents[2]


def worker_command(job: str, server_url: str, namespace: str, name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "tests.core.sem_workers", job, server_url, namespace, name, *args]


@dataclass
class Holder:
    """A ``hold`` worker: a process holding a slot and answering commands."""

    process: subprocess.Popen[str]
    acquired: bool
    holder_id: str | None
    started: float

    def ask(self, command: str) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = json.loads(self.process.stdout.readline())
        return answer


@pytest.fixture
def spawn() -> Iterator[Any]:
    processes: list[subprocess.Popen[str]] = []

    def start(
        command: list[str], prefix: Sequence[str] = (), **kwargs: Any
    ) -> subprocess.Popen[str]:
        process = subprocess.Popen([*prefix, *command], cwd=ROOT, text=True, **kwargs)
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def start_holder(spawn, command: list[str], prefix: Sequence[str] = ()) -> Holder:
    process = spawn(
        command, prefix, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        raise AssertionError(f"worker failed: {process.stderr.read() if process.stderr else ''}")
    first = json.loads(line)
    return Holder(process, first["acquired"], first["holder_id"], time.monotonic())


# -- churn with SIGKILLed holders ---------------------------------------------------------
@dataclass
class Hold:
    start: float
    end: float
    killed: bool


def read_holds(path: Path, ttl: float, grace: float) -> list[Hold]:
    """Hold intervals from a worker log; a killed holder's slot counts until its TTL is
    (almost) over: ``grace`` covers the time between the grant and the log line."""
    holds: list[Hold] = []
    start: float | None = None
    for line in path.read_text().splitlines():
        kind, _, stamp = line.partition(" ")
        if kind == "S":
            start = int(stamp) / 1e9
        elif kind == "E":
            assert start is not None
            holds.append(Hold(start, int(stamp) / 1e9, killed=False))
            start = None
        elif kind == "K":
            assert start is not None
            holds.append(Hold(start, start + ttl - grace, killed=True))
            start = None
    return holds


def peak_concurrency(holds: list[Hold]) -> int:
    events = sorted([(h.start, 1) for h in holds] + [(h.end, -1) for h in holds])
    inside = peak = 0
    for _, step in events:  # at equal times an end (-1) sorts before a start (+1)
        inside += step
        peak = max(peak, inside)
    return peak


def test_20_processes_limit_3_with_sigkilled_holders(
    spawn, redis_server, redis_client, namespace: str, tmp_path: Path
) -> None:
    limit, ttl, per_worker, workers, killers = 3, 1.5, 100, 20, 5
    url = redis_server.url
    logs: list[Path] = []
    running = []
    for index in range(workers):
        log = tmp_path / f"worker-{index}.log"
        logs.append(log)
        args = ["--limit", str(limit), "--ttl", str(ttl), "--acquisitions", str(per_worker)]
        args += ["--log", str(log)]
        if index < killers:  # these kill themselves with SIGKILL while holding
            args += ["--kill-at", str(5 + 7 * index)]
        command = worker_command("churn", url, namespace, "churn", *args)
        running.append((spawn(command, stderr=subprocess.PIPE), index, command))
    replaced = set()
    deadline = time.monotonic() + 240
    while running:
        assert time.monotonic() < deadline, "the workers did not finish in time"
        process, index, command = running.pop(0)
        try:
            code = process.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            running.append((process, index, command))
            continue
        if code == -signal.SIGKILL and index not in replaced:
            # A replacement takes the rest of the killed worker's share, so that 2,000
            # acquisitions are made in all.
            replaced.add(index)
            done = 6 + 7 * index
            log = tmp_path / f"worker-{index}-replacement.log"
            logs.append(log)
            args = ["--limit", str(limit), "--ttl", str(ttl)]
            args += ["--acquisitions", str(per_worker - done), "--log", str(log)]
            command = worker_command("churn", url, namespace, "churn", *args)
            running.append((spawn(command, stderr=subprocess.PIPE), index, command))
        else:
            stderr = process.stderr.read() if process.stderr else ""
            assert code == 0, f"worker {index} failed ({code}): {stderr}"
    holds = [hold for log in logs for hold in read_holds(log, ttl, grace=0.25)]
    killed = [hold for hold in holds if hold.killed]
    assert len(holds) == workers * per_worker
    assert len(killed) == killers == len(replaced)
    peak = peak_concurrency(holds)
    print(f"{len(holds)} holds, {len(killed)} killed holders, peak concurrency {peak}")
    assert peak == limit
    # A killed holder's slot comes back when its TTL runs out: someone is admitted soon after.
    starts = sorted(hold.start for hold in holds)
    for hold in killed:
        expiry = hold.start + ttl
        later = [start for start in starts if start >= expiry - 0.25]
        assert later and later[0] <= expiry + 0.75, "a killed holder's slot did not come back"
    backend = Backend(redis_client, namespace=namespace)
    assert Semaphore("churn", limit, client=backend).count() == 0


def test_sigkilled_holders_slots_come_back_after_their_ttl(
    spawn, redis_server, redis_client, namespace: str
) -> None:
    url, ttl = redis_server.url, 1.0
    args = ("--limit", "3", "--ttl", str(ttl))
    holders = [
        start_holder(spawn, worker_command("hold", url, namespace, "crash", *args))
        for _ in range(3)
    ]
    assert all(holder.acquired for holder in holders)
    for holder in holders:
        holder.process.send_signal(signal.SIGKILL)
    backend = Backend(redis_client, namespace=namespace)
    semaphores = [Semaphore("crash", 3, client=backend, timeout=5) for _ in range(3)]
    # The slots expire in the order they were taken: each comes back about its TTL after its
    # holder took it (the holders started one after the other).
    for holder, semaphore in zip(holders, semaphores, strict=True):
        assert semaphore.acquire(timeout=5)
        back_after = time.monotonic() - holder.started
        print(f"slot back {back_after:.3f} s after it was taken (TTL {ttl} s)")
        assert ttl - 0.15 < back_after < ttl + 0.5
    for semaphore in semaphores:
        semaphore.release()


def test_holder_paused_past_its_ttl_cannot_push_the_count_over_the_limit(
    spawn, redis_server, redis_client, namespace: str
) -> None:
    command = worker_command(
        "hold", redis_server.url, namespace, "paused", "--limit", "2", "--ttl", "1"
    )
    holder = start_holder(spawn, command)
    assert holder.acquired
    holder.process.send_signal(signal.SIGSTOP)
    backend = Backend(redis_client, namespace=namespace)
    others = [Semaphore("paused", 2, client=backend, timeout=10) for _ in range(2)]
    for semaphore in others:
        assert semaphore.acquire(timeout=5)  # the second only once the paused one expired
    holder.process.send_signal(signal.SIGCONT)
    assert holder.ask("refresh") == {"ok": None, "error": "LockLost"}
    assert holder.ask("try") == {"ok": False, "error": None}
    assert holder.ask("count") == {"ok": 2, "error": None}
    assert holder.ask("release")["error"] == "LockNotOwned"  # the lost hold was forgotten
    assert others[0].count() == 2
    for semaphore in others:
        semaphore.release()


# -- skewed client clocks -----------------------------------------------------------------
def faketime(offset: str) -> list[str]:
    if shutil.which("faketime") is None:
        pytest.skip("needs faketime (Debian package 'faketime', installed by .ci/run)")
    return ["faketime", "-f", offset]


@pytest.mark.parametrize("offset", ["+1h", "-1h"])
def test_a_skewed_client_clock_neither_steals_nor_loses_a_slot(
    spawn, redis_server, redis_client, namespace: str, offset: str
) -> None:
    prefix = faketime(offset)
    name = f"skew{offset}"
    command = worker_command(
        "hold", redis_server.url, namespace, name, "--limit", "1", "--ttl", "1"
    )
    skewed = start_holder(spawn, command, prefix)
    assert skewed.acquired
    assert 0.5 < skewed.ask("ensure")["ok"] <= 1.0
    backend = Backend(redis_client, namespace=namespace)
    semaphore = Semaphore(name, 1, client=backend, timeout=5)
    assert not semaphore.acquire(blocking=False)  # its slot does not look expired to others
    assert semaphore.acquire(timeout=5)  # and it does expire after 1 s, as for everyone
    elapsed = time.monotonic() - skewed.started
    assert 0.5 < elapsed < 1.6
    assert skewed.ask("refresh")["error"] == "LockLost"
    assert skewed.ask("try") == {"ok": False, "error": None}  # cannot steal the slot back
    semaphore.release()
    assert skewed.ask("try") == {"ok": True, "error": None}


def test_skewed_processes_never_overlap_on_the_server_clock(
    spawn, redis_server, redis_client, namespace: str, tmp_path: Path
) -> None:
    prefixes = {"ahead": faketime("+1h"), "behind": faketime("-1h"), "true": []}
    processes = []
    logs = []
    for label, prefix in prefixes.items():
        log = tmp_path / f"{label}.log"
        logs.append(log)
        args = ["--limit", "1", "--ttl", "5", "--acquisitions", "40", "--log", str(log)]
        args.append("--server-clock")
        command = worker_command("churn", redis_server.url, namespace, "server-clock", *args)
        processes.append(spawn(command, prefix, stderr=subprocess.PIPE))
    for process in processes:
        assert process.wait(timeout=120) == 0, process.stderr.read()
    holds = [hold for log in logs for hold in read_holds(log, 5, 0)]
    assert len(holds) == 120
    assert peak_concurrency(holds) == 1

"""Run the test project's ``manage.py`` as real processes, and read what the commands logged."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MANAGE = [sys.executable, "-m", "tests.testapp"]  # the test project's manage.py


def default_signals() -> None:
    """In a child before it runs: SIGINT and SIGTERM at their default dispositions."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def sigint_ignored() -> None:
    """In a child before it runs: SIGINT ignored (as ``nohup`` or ``cmd &`` start it),
    SIGTERM at its default."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class Manage:
    """Starts ``manage.py`` processes of the test project on one Redis server and key namespace."""

    def __init__(self, redis_url: str, namespace: str) -> None:
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.testapp.settings",
            "DRL_TEST_REDIS_URL": redis_url,
            "DRL_TEST_NAMESPACE": namespace,
            "PYTHONUNBUFFERED": "1",
        }
        self.processes: list[subprocess.Popen[str]] = []

    def start(self, *argv: str, **kwargs: Any) -> subprocess.Popen[str]:
        """``manage.py <argv>``, stdin empty, stdout and stderr piped (text), SIGINT and
        SIGTERM at their defaults, as a shell or cron starts a command (whatever the suite
        inherited: a shell's background job ignores SIGINT, and its children would too)."""
        options: dict[str, Any] = {
            "stdin": subprocess.DEVNULL,
            "stdout": subprocess.PIPE,
            "stderr": subprocess.PIPE,
            "preexec_fn": default_signals,
        }
        options.update(kwargs)
        process = subprocess.Popen([*MANAGE, *argv], cwd=ROOT, env=self.env, text=True, **options)
        self.processes.append(process)
        return process

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run ``manage.py <argv>`` to the end."""
        process = self.start(*argv)
        stdout, stderr = process.communicate(timeout=timeout)
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=10)


@contextmanager
def manage_processes(redis_url: str, namespace: str) -> Iterator[Manage]:
    manage = Manage(redis_url, namespace)
    try:
        yield manage
    finally:
        manage.close()


def finish(process: subprocess.Popen[str], timeout: float = 30) -> tuple[int, str, str]:
    """Wait for ``process``; its exit code, stdout and stderr."""
    stdout, stderr = process.communicate(timeout=timeout)
    return process.returncode, stdout, stderr


@dataclass(frozen=True)
class Record:
    """A line the ``limited`` command logged: S (start), E (end) or L (learnt of the loss)."""

    kind: str
    ns: int  # time.monotonic_ns(): one clock for every process on the machine
    pid: int
    holder_id: str


def read_log(path: Path) -> list[Record]:
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        kind, ns, pid, holder = line.split()
        records.append(Record(kind, int(ns), int(pid), holder))
    return records


def records_of(path: Path, kind: str) -> list[Record]:
    return [record for record in read_log(path) if record.kind == kind]


def intervals(path: Path) -> dict[int, tuple[int, int]]:
    """pid -> (start ns, end ns) of every run that logged both."""
    starts = {r.pid: r.ns for r in records_of(path, "S")}
    return {r.pid: (starts[r.pid], r.ns) for r in records_of(path, "E")}


def peak(spans: Sequence[tuple[float, float]]) -> int:
    """The most spans open at one instant (a sweep; an end sorts before a start)."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    inside = most = 0
    for _, step in events:
        inside += step
        most = max(most, inside)
    return most

"""Starting and steering the worker processes of :mod:`tests.chaos.workers`."""

from __future__ import annotations

import contextlib
import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.harness.servers import wait_until

ROOT = Path(__file__).resolve().parents[2]


def _state(pid: int) -> str | None:
    """The one-letter Linux state of a process (R, S, T, ...), None if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return None


def worker_command(job: str, **options: object) -> list[str]:
    """``python -m tests.chaos.workers <job> --option value ...`` (True: a bare flag)."""
    argv = [sys.executable, "-m", "tests.chaos.workers", job]
    for key, value in options.items():
        if value is False or value is None:
            continue
        argv.append("--" + key.replace("_", "-"))
        if value is not True:
            argv.append(str(value))
    return argv


class Processes:
    """Every process a test starts; at teardown the live ones are continued and killed."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def start(
        self, command: Sequence[str], prefix: Sequence[str] = (), **kwargs: Any
    ) -> subprocess.Popen[str]:
        process = subprocess.Popen([*prefix, *command], cwd=ROOT, text=True, **kwargs)
        self.started.append(process)
        return process

    def close(self) -> None:
        for process in self.started:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGCONT)
                    process.kill()
            process.wait(timeout=10)
            for stream in (process.stdin, process.stdout, process.stderr):
                if stream is not None:
                    stream.close()


class Holder:
    """A ``holder`` worker: sends it commands, collects its JSON events as they come."""

    def __init__(
        self,
        processes: Processes,
        command: Sequence[str],
        prefix: Sequence[str] = (),
        *,
        wait_held: bool = True,
    ) -> None:
        self.process = processes.start(
            command,
            prefix,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.held = self.wait_for("held", timeout=30) if wait_held else {}

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(json.JSONDecodeError):
                self.events.put(json.loads(line))

    def wait_for(self, event: str, timeout: float) -> dict[str, Any]:
        """The next event of kind ``event`` (others seen meanwhile are kept in ``seen``)."""
        deadline = time.monotonic() + timeout
        while True:
            for index, seen in enumerate(self.seen):
                if seen["event"] == event:
                    return self.seen.pop(index)
            left = deadline - time.monotonic()
            if left <= 0:
                stderr = ""
                if self.process.poll() is not None and self.process.stderr is not None:
                    stderr = self.process.stderr.read()
                raise AssertionError(f"worker {self.pid}: no {event!r} within {timeout} s {stderr}")
            with contextlib.suppress(queue.Empty):
                self.seen.append(self.events.get(timeout=left))

    def poll(self, event: str, timeout: float) -> dict[str, Any] | None:
        """Like :meth:`wait_for`, but None when no such event came within ``timeout``."""
        try:
            return self.wait_for(event, timeout)
        except AssertionError:
            return None

    def ask(self, command: str, timeout: float = 30) -> dict[str, Any]:
        """Send one command; its answer (``ok``, ``error``)."""
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.wait_for("answer", timeout)

    def pause(self) -> None:
        """SIGSTOP, and wait until the process is stopped (a signal is delivered a moment
        after ``kill()`` returns)."""
        self.process.send_signal(signal.SIGSTOP)
        wait_until(lambda: _state(self.pid) == "T", timeout=5, what=f"{self.pid} to stop")

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

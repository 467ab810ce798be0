"""The processes of a deployment: each server started in a process group of its own, its
output in a log file, and stopped for sure (SIGTERM, then SIGKILL to its whole group).

Only processes of those groups are ever signalled: :meth:`Service.owns` checks a pid before
a test kills it.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from tests.harness.servers import _deathsig_preexec

ROOT = Path(__file__).resolve().parents[2]
STOP_SECONDS = 5.0  # a SIGTERMed server gets this long before its group is SIGKILLed


class DeployError(RuntimeError):
    """A server of the deployment did not start, answer or stop as expected."""


class Service:
    """One server process (the leader of a new process group) writing to ``log_path``."""

    def __init__(
        self,
        label: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
        *,
        pipes: bool = False,
    ) -> None:
        self.label = label
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                list(argv),
                cwd=ROOT,
                env=dict(env),
                stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
                stdout=subprocess.PIPE if pipes else log,
                stderr=log,
                start_new_session=True,
                preexec_fn=_deathsig_preexec(),  # noqa: PLW1509 - only prctl and getppid
                text=pipes,
            )
        self.pid = self.process.pid  # also the process group's id

    def __repr__(self) -> str:
        return f"<Service {self.label} pid={self.pid}>"

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def owns(self, pid: int) -> bool:
        """Whether ``pid`` is this server or one of its processes (same process group)."""
        try:
            return os.getpgid(pid) == self.pid
        except ProcessLookupError:
            return False

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def describe(self) -> str:
        state = "running" if self.alive else f"exited with {self.process.returncode}"
        return f"--- {self.label} ({state}), last lines of its log ---\n{self.log_tail()}"

    def stop(self) -> None:
        """SIGTERM the leader, wait up to STOP_SECONDS, then SIGKILL the whole group."""
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(STOP_SECONDS)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # children left behind, or a stuck leader
        self.process.wait(10)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


class LineClient:
    """A :class:`Service` spoken to in JSON lines: one command written, one reply read."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self._replies: queue.Queue[str] = queue.Queue()
        stdout = service.process.stdout
        assert stdout is not None
        threading.Thread(target=self._read, args=(stdout,), daemon=True).start()

    def _read(self, stdout: IO[str]) -> None:
        with contextlib.suppress(ValueError, OSError):  # closed at stop
            for line in stdout:
                self._replies.put(line)
        self._replies.put("")  # end of output

    def request(self, command: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        stdin = self.service.process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(command) + "\n")
            stdin.flush()
            line = self._replies.get(timeout=timeout)
        except (OSError, queue.Empty) as exc:
            raise DeployError(
                f"{self.service.label}: no reply to {command} in {timeout:g} s ({exc!r})\n"
                + self.service.describe()
            ) from None
        if not line:
            raise DeployError(f"{self.service.label} exited\n" + self.service.describe())
        reply: dict[str, Any] = json.loads(line)
        return reply


def wait_for(
    condition: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    services: Sequence[Service] = (),
    interval: float = 0.05,
) -> None:
    """Poll ``condition`` until true; on timeout raise DeployError with the services' logs.

    A service that exits meanwhile fails at once."""
    deadline = time.monotonic() + timeout
    while not condition():
        dead = [service for service in services if not service.alive]
        if dead or time.monotonic() >= deadline:
            reason = "a server exited" if dead else f"timed out after {timeout:g} s"
            logs = "\n".join(service.describe() for service in services)
            raise DeployError(f"{reason} waiting for {what}\n{logs}")
        time.sleep(interval)

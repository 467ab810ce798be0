"""The README's demo (``example_project/run_demo.py``), run as a user runs it.

Both tests run it on its own embedded Redis ($REDIS_URL removed from its environment), not on
the suite's server: that is what ``bin/demo`` does on a fresh clone, so starting and stopping
that server is tested too (the leftover check covers it), and the demo's keys never land on
the suite's shared server.

- ``--for 3`` exits 0, and its summary says every feature ran and nothing overlapped;
- Ctrl-C (SIGINT to the demo's foreground process group, as a terminal sends it) stops the
  interactive demo, and no process it started (web server, workers, the commands they run,
  Redis) is left: each of them runs in a session of its own, so every process that was a
  descendant of the demo, or is in one of their sessions, must be gone.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.testapp.runner import sigint_ignored

ROOT = Path(__file__).resolve().parents[1]
RUN_DEMO = ROOT / "example_project" / "run_demo.py"

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="reads the process table from /proc (Linux)"
)


def demo_env() -> dict[str, str]:
    """This environment without what would point the demo elsewhere (pytest sets the first)."""
    dropped = {"DJANGO_SETTINGS_MODULE", "REDIS_URL", "DEMO_DATABASE", "DEMO_EVENTS"}
    return {key: value for key, value in os.environ.items() if key not in dropped}


def count(pattern: str, text: str) -> int:
    match = re.search(pattern, text)
    assert match is not None, f"no line matching {pattern!r} in:\n{text}"
    return int(match.group(1))


def test_demo_for_3_seconds_runs_every_feature_without_violations() -> None:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(RUN_DEMO), "--for", "3"],
        env=demo_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert time.monotonic() - started < 30
    assert count(r"unique task runs: (\d+)", out) > 0
    assert count(r"semaphore command runs: (\d+)", out) > 0
    assert count(r"view requests answered 200: \d+ \(charge (\d+)", out) > 0
    assert count(r"view requests answered 200: \d+ \(charge \d+, acharge (\d+)", out) > 0
    assert count(r"view requests answered 409: (\d+)", out) > 0
    assert count(r"admin live pages: \d+ \(most holders shown: (\d+)\)", out) > 0
    assert 1 <= count(r"max concurrency per semaphore: command:import_feed (\d+)", out) <= 2
    locks = re.search(r"max concurrency per lock \(limit 1\): (.*)", out)
    assert locks is not None
    peaks = re.findall(r"(\S+) (\d+)(?:,|$)", locks.group(1))
    assert {name for name, _ in peaks} >= {"rebuild:products", "rebuild:customers"}
    assert all(peak == "1" for _, peak in peaks), locks.group(1)
    assert count(r"errors: (\d+)", out) == 0
    assert count(r"violations: (\d+)", out) == 0
    assert "demo OK: every feature ran, no violations" in out


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    session: int
    args: str


def processes() -> dict[int, Proc]:
    """The process table from /proc: pid -> (parent, session, command line)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # it ended meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        table[int(entry.name)] = Proc(int(entry.name), int(fields[1]), int(fields[3]), args)
    return table


def descendants(pid: int) -> list[Proc]:
    table = processes()
    found: list[Proc] = []
    parents = {pid}
    while True:
        children = [p for p in table.values() if p.ppid in parents and p not in found]
        if not children:
            return found
        found += children
        parents = {p.pid for p in children}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def admin_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.mark.parametrize(
    "parent", ["terminal", "ignoring-sigint"], ids=["started-in-a-terminal", "sigint-ignored"]
)
def test_ctrl_c_stops_the_interactive_demo_and_leaves_no_process(parent: str) -> None:
    """Also when whoever started the demo ignored SIGINT (a shell's background job, nohup):
    the demo restores it, so Ctrl-C still stops it."""
    port = free_port()
    demo = subprocess.Popen(
        [sys.executable, str(RUN_DEMO), "--port", str(port)],
        env=demo_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own foreground group, as in a terminal
        preexec_fn=sigint_ignored if parent == "ignoring-sigint" else None,  # noqa: PLW1509
    )
    started: list[Proc] = []
    try:
        deadline = time.monotonic() + 30
        while True:
            assert demo.poll() is None, demo.communicate()[0]
            started = descendants(demo.pid)
            commands = " | ".join(p.args for p in started)
            if (
                admin_answers(f"http://127.0.0.1:{port}/admin/login/")
                and "runserver --noreload" in commands
                and "import_feed" in commands  # a command a worker runs: a grandchild
                and all(f"demo_worker {role}" in commands for role in ("task", "command", "http"))
                and ("valkey-server" in commands or "redis-server" in commands)
            ):
                break
            assert time.monotonic() < deadline, f"not up after 30 s; running: {commands}"
            time.sleep(0.2)

        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C
        out, _ = demo.communicate(timeout=20)
        assert demo.returncode == 0, out
        assert "stopping..." in out
        assert "violations: 0" in out

        ours = {(p.pid, p.args) for p in started}
        sessions = {p.session for p in started}

        def left() -> list[Proc]:
            table = processes().values()
            return [p for p in table if (p.pid, p.args) in ours or p.session in sessions]

        # A grandchild may still be in the kernel's last steps of its exit (no command line,
        # reparented) when the demo returns: what counts is that none stays.
        deadline = time.monotonic() + 5
        while left() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left(), f"left behind: {left()}"
        assert not admin_answers(f"http://127.0.0.1:{port}/admin/login/")
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        table = processes()
        for proc in started:  # whatever a failed test left (the same process, not a new one)
            if (now := table.get(proc.pid)) is not None and now.args == proc.args:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)


def test_help_names_the_command_that_was_run() -> None:
    as_launched = subprocess.run(
        [sys.executable, str(RUN_DEMO), "--help"],
        env={**demo_env(), "DRL_DEMO_LAUNCHER": "bin/demo"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert as_launched.returncode == 0
    assert as_launched.stdout.startswith("usage: bin/demo [-h]")
    direct = subprocess.run(
        [sys.executable, str(RUN_DEMO), "--help"],
        env={k: v for k, v in demo_env().items() if k != "DRL_DEMO_LAUNCHER"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert direct.stdout.startswith("usage: python example_project/run_demo.py [-h]")
    assert 'DRL_DEMO_LAUNCHER="bin/demo"' in (ROOT / "bin" / "demo").read_text()

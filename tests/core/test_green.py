"""gevent and eventlet: holds of the main greenlet and of spawned greenlets are renewed, and
wake-ups work, in monkey-patched processes, whether the patch comes before or after the
library is imported (eventlet: before, as eventlet itself requires)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("flavour", "when", "parser"),
    [
        ("gevent", "early", "default"),
        ("gevent", "late", "default"),
        # connections opened before the patch have plain sockets: a waiter reading the
        # wake-up subscription on one blocked every greenlet (redis-py's pure-Python parser
        # reads the socket itself; so did its hiredis parser in redis-py 5)
        ("gevent", "late", "python"),
        ("eventlet", "early", "default"),
    ],
)
def test_greenlet_holds_are_renewed_and_woken_in_a_patched_process(
    redis_server: Any, namespace: str, flavour: str, when: str, parser: str
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.core.green_worker",
            flavour,
            when,
            redis_server.url,
            namespace,
            parser,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["errors"] == [] and seen["stolen"] == 0
    assert seen["handover_s"] < 1.0  # woken by the release, not by a 30 s re-check
    assert "Traceback" not in done.stderr


@pytest.mark.deploy
def test_the_renewal_wake_up_and_ownership_tests_pass_under_gevent() -> None:
    """The same tests as in a plain process, in a process patched by gevent.patch_all()."""
    code = (
        "from gevent import monkey; monkey.patch_all()\n"
        "import sys, pytest\n"
        "sys.exit(pytest.main(['-q', '-p', 'no:randomly', *sys.argv[1:]]))\n"
    )
    tests = [
        "tests/core/test_renewal.py",
        "tests/core/test_wakeup.py",
        "tests/core/test_ownership.py",
    ]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code, *tests],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and "failed" not in done.stdout

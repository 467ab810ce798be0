"""The interpreter's exit: our background threads end before Python finalizes.

A daemon thread that writes to stderr while Python finalizes aborts the interpreter ("Fatal
Python error: _enter_buffered_busy", exit code -6): a renewal lane logging that its Redis went
away as the process ended (a test run's servers are stopped before its process exits) did so
once in CI. The library's exit hook stops its threads first.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from typing import Any

# Registered before the library is imported, so it runs after the library's own exit hook
# (atexit runs last-registered first): what it sees is what Python finalizes with.
_PROBE = """
import atexit, sys, threading
def _probe():
    alive = sorted(t.name for t in threading.enumerate() if t.name.startswith("drl-"))
    print("ALIVE", ",".join(alive), flush=True)
atexit.register(_probe)
"""


def _run(script: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    code = _PROBE + textwrap.dedent(script)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _alive(result: subprocess.CompletedProcess[str]) -> list[str]:
    lines = [line for line in result.stdout.splitlines() if line.startswith("ALIVE")]
    assert lines, f"the probe did not run:\n{result.stdout}\n{result.stderr}"
    return [name for name in lines[-1].removeprefix("ALIVE").strip().split(",") if name]


def test_lanes_and_the_callback_thread_end_before_finalization(redis_server: Any) -> None:
    result = _run(
        """
        import sys
        import redis
        from django_redis_locks.core import Lock
        from django_redis_locks.core.runtime.callbacks import callbacks
        from django_redis_locks.core.runtime.renewal import renewer

        lock = Lock("exit-lanes", client=redis.Redis.from_url(sys.argv[1]), timeout=30,
                    auto_renew=True)
        assert lock.acquire()
        callbacks().submit(lambda: None)
        assert renewer().running and callbacks().running
        print("HELD", flush=True)
        """,
        redis_server.url,
    )
    assert result.returncode == 0, result.stderr
    assert "HELD" in result.stdout, result.stderr
    assert _alive(result) == []


def test_a_lane_inside_a_call_to_a_stalled_server_delays_the_exit_boundedly(
    make_server: Any,
) -> None:
    """Its server paused, the lane is inside a renewal that the socket timeout (20 s) ends:
    the exit waits for it about a second, and nothing the lane says afterwards reaches stderr."""
    server = make_server()
    script = """
        import logging, sys, time
        import redis
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
        from django_redis_locks.core import Lock

        client = redis.Redis.from_url(sys.argv[1], socket_timeout=20)
        lock = Lock("exit-stalled", client=client, timeout=0.6, auto_renew=True)
        assert lock.acquire()
        print("HELD", flush=True)
        sys.stdin.readline()  # the server is paused now
        time.sleep(0.4)  # a renewal (due every 0.2 s) is on its way to the paused server
        print("EXITING", file=sys.stderr, flush=True)
        print("EXITING", flush=True)
        """
    process = subprocess.Popen(
        [sys.executable, "-c", _PROBE + textwrap.dedent(script), server.url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdin is not None
        assert process.stdout.readline().strip() == "HELD"
        server.pause()
        process.stdin.write("go\n")
        process.stdin.flush()
        assert process.stdout.readline().strip() == "EXITING"
        started = time.monotonic()
        out, err = process.communicate(timeout=30)
        took = time.monotonic() - started
    finally:
        server.resume()
        if process.poll() is None:
            process.kill()
    result = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    assert result.returncode == 0, result.stderr
    assert took < 5, f"the exit waited {took:.1f} s"
    after = result.stderr.split("EXITING", 1)[1]
    assert "drl" not in after and "renew" not in after, after
    assert _alive(result) == ["drl-renew"]  # still inside its call, silenced

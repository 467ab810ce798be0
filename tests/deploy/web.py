"""gunicorn serving the project: sync, gthread and gevent workers on its WSGI application,
uvicorn workers on its ASGI application (async views). Two worker processes each, on a free
loopback port; calls are HTTP requests from a thread pool of the test."""

from __future__ import annotations

import http.client
import importlib.util
import json
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from tests.deploy.deployment import Call, Deployment, Pending
from tests.deploy.processes import DeployError, Service, wait_for
from tests.harness.servers import HOST, free_port

WORKERS = 2
HTTP_TIMEOUT = 90.0


def uvicorn_worker_class() -> str | None:
    """The uvicorn worker class for gunicorn that is installed: uvicorn-worker's, else the one
    older uvicorn releases shipped; None without either."""
    if importlib.util.find_spec("uvicorn_worker") is not None:
        return "uvicorn_worker.UvicornWorker"
    if importlib.util.find_spec("uvicorn") is not None:
        try:
            found = importlib.util.find_spec("uvicorn.workers")
        except ImportError:
            found = None
        if found is not None:
            return "uvicorn.workers.UvicornWorker"
    return None


def missing(pool: str) -> str | None:
    """What a gunicorn deployment with worker ``pool`` lacks, in words (None: nothing)."""
    if importlib.util.find_spec("gunicorn") is None:
        return "gunicorn is not installed"
    if pool == "gevent" and importlib.util.find_spec("gevent") is None:
        return "gevent is not installed (gunicorn -k gevent)"
    if pool == "uvicorn" and uvicorn_worker_class() is None:
        return "uvicorn-worker is not installed (gunicorn -k uvicorn_worker.UvicornWorker)"
    return None


def get(url: str, timeout: float = HTTP_TIMEOUT) -> Call:
    """One GET; 200 is a run (its record), 409 a refusal (with Retry-After)."""
    parts = url.split("/", 3)  # http: '' host:port path
    host, _, port = parts[2].partition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        connection.request("GET", "/" + parts[3])
        response = connection.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as exc:
        return Call(error=f"GET {url}: {exc!r}")
    finally:
        connection.close()
    if response.status == 200:
        return Call(record=json.loads(body))
    if response.status == 409:
        header = response.getheader("Retry-After")
        return Call(refused=True, retry_after=int(header) if header is not None else None)
    return Call(error=f"GET {url}: {response.status} {body[:300]!r}")


class WebDeployment(Deployment):
    """gunicorn with ``WORKERS`` workers of one class."""

    children_hold = True

    def __init__(self, pool: str, redis_url: str, workdir: Path, namespace: str) -> None:
        super().__init__("gunicorn", pool, redis_url, workdir, namespace)
        self.port = free_port()
        self.base = f"http://{HOST}:{self.port}"
        self.prefix = "async" if pool == "uvicorn" else "sync"
        self.figures["workers"] = WORKERS
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix=f"http-{pool}")

    def start(self) -> None:
        app = "tests.deploy.project.wsgi:application"
        options = ["--worker-class", self.pool]
        if self.pool == "gthread":
            options += ["--threads", "2"]
            self.figures["threads"] = 2
        elif self.pool == "uvicorn":
            app = "tests.deploy.project.asgi:application"
            options = ["--worker-class", str(uvicorn_worker_class())]
        argv = [
            sys.executable, "-m", "gunicorn", app,
            "--bind", f"{HOST}:{self.port}",
            "--workers", str(WORKERS),
            "--timeout", "90",
            "--graceful-timeout", "2",
            "--log-level", "info",
            *options,
        ]  # fmt: skip
        self.services.append(Service(self.label, argv, self.env, self.workdir / "gunicorn.log"))
        seen: set[int] = set()

        def every_worker_answers() -> bool:
            pings = [self._pool.submit(self._ping) for _ in range(2 * WORKERS)]
            seen.update(pid for ping in pings if (pid := ping.result()) is not None)
            return len(seen) >= WORKERS

        wait_for(every_worker_answers, timeout=60, what="every worker", services=self.services)

    def _ping(self) -> int | None:
        call = get(f"{self.base}/{self.prefix}/ping/?seconds=0.2", timeout=5)
        return call.record["pid"] if call.record is not None else None

    def url(self, kind: str, name: str, seconds: float) -> str:
        return f"{self.base}/{self.prefix}/{kind}/{name}/?seconds={seconds}"

    def call_many(self, kind: str, name: str, count: int, seconds: float) -> list[Call]:
        futures = [self._pool.submit(get, self.url(kind, name, seconds)) for _ in range(count)]
        return [future.result() for future in futures]

    def begin(self, kind: str, name: str, seconds: float) -> Pending:
        return Pending(self._pool.submit(get, self.url(kind, name, seconds)))

    def finish(self, pending: Pending, timeout: float) -> Call:
        future: Future[Call] = pending.handle
        try:
            return future.result(timeout)
        except FutureTimeout:
            return Call(error=f"no answer in {timeout:g} s")

    def attempt(self, name: str) -> Call:
        return get(self.url("attempt", name, 0), timeout=10)

    def probe(self, name: str) -> bool:
        """Another request gets the name: the ``attempt`` view runs (200) instead of 409."""
        call = get(self.url("attempt", name, 0), timeout=10)
        if call.error is not None:
            raise DeployError(f"{self}: {call.error}\n{self.describe()}")
        return call.ran

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

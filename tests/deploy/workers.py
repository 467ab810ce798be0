"""Task workers running the project's tasks: a Celery worker with the prefork, threads or
gevent pool (broker and result backend on the test's Redis server, in db ``BROKER_DB``), and
two ``db_worker`` processes of Django's task framework on an SQLite file. Tasks are enqueued
and their results read by the project's task client (:mod:`tests.deploy.project.client`)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django_redis_locks import SKIPPED
from tests.deploy.deployment import Call, Deployment, Pending
from tests.deploy.processes import DeployError, LineClient, Service, wait_for
from tests.harness.acl import unrestricted_url

BROKER_DB = 1  # the locks use db 0 of the same server
CELERY_CONCURRENCY = {"prefork": 2, "threads": 3, "gevent": 4}
DB_WORKERS = 2
RESULT_TIMEOUT = 60.0


def missing(server: str, pool: str) -> str | None:
    """What a worker deployment lacks, in words (None: nothing)."""
    if server == "celery":
        if pool == "gevent" and importlib.util.find_spec("gevent") is None:
            return "gevent is not installed (celery worker -P gevent)"
        return None
    if importlib.util.find_spec("django_tasks_db") is None:
        return "django-tasks-db is not installed (its DatabaseBackend and db_worker command)"
    if importlib.util.find_spec("django.tasks") is None and (
        importlib.util.find_spec("django_tasks") is None
    ):
        return "django-tasks is not installed (Django's task framework before Django 6.0)"
    return None


def broker_url(redis_url: str) -> str:
    """The server's URL on db BROKER_DB, as the unrestricted user (in ACL mode the library's
    user may only touch the library's keys)."""
    parts = urlsplit(unrestricted_url(redis_url))
    return urlunsplit(parts._replace(path=f"/{BROKER_DB}"))


class TaskDeployment(Deployment):
    """Workers, and the task client that enqueues and waits."""

    client: LineClient

    def _start_client(self, kind: str) -> None:
        argv = [sys.executable, "-m", "tests.deploy.project.client", kind]
        service = Service("task-client", argv, self.env, self.workdir / "client.log", pipes=True)
        self.services.append(service)
        self.client = LineClient(service)

    def _send(self, task: str, *args: Any) -> str:
        reply = self.client.request({"op": "send", "task": task, "args": list(args)}, 30)
        return str(reply["id"])

    def _wait(self, ids: list[str], timeout: float) -> list[dict[str, Any]]:
        reply = self.client.request({"op": "wait", "ids": ids, "timeout": timeout}, timeout + 10)
        results: list[dict[str, Any]] = reply["results"]
        return results

    @staticmethod
    def _call(outcome: dict[str, Any]) -> Call:
        if not outcome["ok"]:
            return Call(error=outcome["error"])
        value = outcome["value"]
        if value == SKIPPED:
            return Call(refused=True)
        if isinstance(value, dict):
            return Call(record=value)
        return Call(error=f"unexpected result {value!r}")

    def call_many(self, kind: str, name: str, count: int, seconds: float) -> list[Call]:
        ids = [self._send(kind, name, seconds) for _ in range(count)]
        return [self._call(outcome) for outcome in self._wait(ids, RESULT_TIMEOUT)]

    def begin(self, kind: str, name: str, seconds: float) -> Pending:
        return Pending(self._send(kind, name, seconds))

    def finish(self, pending: Pending, timeout: float) -> Call:
        return self._call(self._wait([pending.handle], timeout)[0])

    def attempt(self, name: str) -> Call:
        return self._call(self._wait([self._send("attempt", name, 0)], 30)[0])

    def ping(self) -> None:
        """A task round trip: the workers take tasks and the client reads results."""
        outcome = self._wait([self._send("ping")], RESULT_TIMEOUT)[0]
        if not outcome["ok"]:
            raise DeployError(f"{self}: the ping task failed: {outcome}\n{self.describe()}")


class CeleryDeployment(TaskDeployment):
    """``celery -A tests.deploy.project.celery_app worker -P <pool>`` on the test's queue."""

    def __init__(self, pool: str, redis_url: str, workdir: Path, namespace: str) -> None:
        super().__init__("celery", pool, redis_url, workdir, namespace)
        self.env["DRL_DEPLOY_BROKER_URL"] = broker_url(redis_url)
        self.children_hold = pool == "prefork"
        self.figures["concurrency"] = CELERY_CONCURRENCY[pool]

    def start(self) -> None:
        log = self.workdir / "celery.log"
        argv = [
            sys.executable, "-m", "celery", "-A", "tests.deploy.project.celery_app",
            "worker",
            "--pool", self.pool,
            "--concurrency", str(CELERY_CONCURRENCY[self.pool]),
            "--queues", self.namespace,
            "--hostname", f"{self.label}-{self.namespace}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            "--loglevel", "INFO",
        ]  # fmt: skip
        worker = Service(self.label, argv, self.env, log)
        self.services.append(worker)
        wait_for(
            lambda: " ready." in worker.log_tail(200),
            timeout=60,
            what="the Celery worker to be ready",
            services=self.services,
        )
        self._start_client("celery")
        self.ping()


class DbWorkerDeployment(TaskDeployment):
    """``manage.py db_worker`` twice, on an SQLite file migrated first."""

    def __init__(self, redis_url: str, workdir: Path, namespace: str) -> None:
        super().__init__("django-tasks", "db_worker", redis_url, workdir, namespace)
        self.env["DRL_DEPLOY_DATABASE"] = str(workdir / "tasks.sqlite3")
        self.figures["workers"] = DB_WORKERS

    def start(self) -> None:
        manage = [sys.executable, "-m", "tests.deploy.project"]
        done = subprocess.run(
            [*manage, "migrate", "--no-input", "--verbosity", "0"],
            env=self.env,
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise DeployError(f"migrate failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        for number in range(1, DB_WORKERS + 1):
            argv = [
                *manage, "db_worker",
                "--interval", "0.05",
                "--no-startup-delay",
                "--no-reload",
                "--worker-id", f"{self.namespace}-{number}",
            ]  # fmt: skip
            log = self.workdir / f"db_worker-{number}.log"
            self.services.append(Service(f"db_worker-{number}", argv, self.env, log))
        workers = list(self.services)
        wait_for(
            lambda: all("Starting worker" in worker.log_tail(50) for worker in workers),
            timeout=60,
            what="the db_worker processes to start",
            services=self.services,
        )
        self._start_client("django")
        self.ping()

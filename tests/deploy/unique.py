"""The task deployments of :mod:`tests.deploy.workers` for unique tasks: enqueues that may be
refused (``AlreadyQueued``) from the task client or from more clients started for a test,
``task.find``, the holds as Redis has them; for ``db_worker``
(:mod:`tests.deploy.project.unique_jobs`) the task rows of the SQLite file as the workers
left them, for Celery's prefork pool (:mod:`tests.deploy.project.celery_app`) its children.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from django_redis_locks.core import HolderInfo
from tests.deploy.processes import DeployError, LineClient, Service, wait_for
from tests.deploy.workers import CeleryDeployment, DbWorkerDeployment, TaskDeployment

POLL_SECONDS = 0.02
#: The database backend's table of tasks (their rows keep the task's module path).
TABLE = "django_tasks_database_dbtaskresult"
#: The unique tasks' lock names, by kind (the key templates of unique_jobs and celery_app;
#: those modules are not imported here: they define tasks, for the deployment's settings).
KEYS = {
    "unique": "unique:{}",
    "starting": "starting:{}",
    "limited": "limited:{}",
    "retried": "retried:{}",
    "redelivered": "redelivered:{}",
    "refreshed": "refreshed:{}",
}
DJANGO_KINDS = ("unique", "starting")


@dataclass(frozen=True)
class Attempt:
    """One enqueue: accepted (``task_id`` is the new task's) or refused with AlreadyQueued
    (``task_id`` is the existing task's, None when not known yet); ``at``: when it began
    (``time.monotonic()``, one clock for every process)."""

    at: float
    accepted: bool
    task_id: str | None

    @classmethod
    def of(cls, outcome: dict[str, Any]) -> Attempt:
        if outcome.get("refused"):
            return cls(outcome["t"], False, outcome["task_id"])
        return cls(outcome["t"], True, outcome["id"])


def task_path(kind: str) -> str:
    """The module path of the project's task ``kind``."""
    module = "unique_jobs" if kind in DJANGO_KINDS else "jobs"
    return f"tests.deploy.project.{module}.{kind}"


def lock_name(kind: str, name: str) -> str:
    """The lock a unique task of ``kind`` with argument ``name`` holds."""
    return KEYS[kind].format(name)


class UniqueTasks(TaskDeployment):
    """Workers running unique tasks, and the clients that enqueue them."""

    client_kind = "django"  # of tests.deploy.project.client

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.figures["tasks"] = "unique"
        self.extra_clients = 0

    # -- clients ----------------------------------------------------------------------------
    def more_clients(self, count: int) -> list[LineClient]:
        """``count`` more task clients (processes), each answering once before this returns."""
        clients = []
        for _ in range(count):
            self.extra_clients += 1
            label = f"task-client-{self.extra_clients}"
            argv = [sys.executable, "-m", "tests.deploy.project.client", self.client_kind]
            log = self.workdir / f"{label}.log"
            service = Service(label, argv, self.env, log, pipes=True)
            self.services.append(service)
            clients.append(LineClient(service))
        for client in clients:  # started together; each answers once Django is set up
            client.request({"op": "find", "task": "unique", "args": ["nothing", 0]}, 60)
        return clients

    def enqueue(
        self,
        kind: str,
        name: str,
        seconds: float,
        *,
        count: int = 1,
        at: float | None = None,
        client: LineClient | None = None,
    ) -> list[Attempt]:
        """``count`` enqueues of unique task ``kind`` by one client (the task client unless
        given), from the instant ``at`` (at once if None)."""
        command = {"op": "enqueue", "task": kind, "args": [name, seconds], "count": count}
        reply = (client or self.client).request({**command, "at": at}, 60)
        return [Attempt.of(outcome) for outcome in reply["outcomes"]]

    def together(
        self, clients: list[LineClient], kind: str, name: str, seconds: float, count: int
    ) -> list[list[Attempt]]:
        """Every client enqueues ``count`` times, all from the same instant."""
        at = time.monotonic() + 0.5  # each client has its command by then

        def one(client: LineClient) -> list[Attempt]:
            return self.enqueue(kind, name, seconds, count=count, at=at, client=client)

        with ThreadPoolExecutor(len(clients)) as pool:
            return list(pool.map(one, clients))

    def burst(
        self, clients: int, each: int, kind: str, name: str, seconds: float
    ) -> tuple[Attempt, list[Attempt], list[LineClient], list[list[Attempt]]]:
        """``clients`` more clients enqueue the same task ``each`` times, all from one
        instant: (the one accepted, the refused ones, the clients, each one's attempts), the
        figures noted. Exactly one must be accepted."""
        started = self.more_clients(clients)
        by_client = self.together(started, kind, name, seconds, each)
        attempts = [attempt for attempts in by_client for attempt in attempts]
        accepted = [attempt for attempt in attempts if attempt.accepted]
        refused = [attempt for attempt in attempts if not attempt.accepted]
        starts = [attempts[0].at for attempts in by_client]
        self.figures.update(
            unique_enqueues=len(attempts),
            unique_enqueues_accepted=len(accepted),
            unique_enqueues_refused=len(refused),
            unique_burst_spread_s=round(max(starts) - min(starts), 3),
        )
        assert len(attempts) == clients * each
        assert len(accepted) == 1, f"{accepted}\n{self.describe()}"
        return accepted[0], refused, started, by_client

    def find(self, kind: str, name: str, client: LineClient | None = None) -> dict[str, Any] | None:
        command = {"op": "find", "task": kind, "args": [name, 0.0]}
        found: dict[str, Any] | None = (client or self.client).request(command, 30)["found"]
        return found

    def result(self, task_id: str, client: LineClient | None = None) -> dict[str, Any]:
        """The outcome of a task the client enqueued, once it has one (within 60 s)."""
        reply = (client or self.client).request({"op": "wait", "ids": [task_id], "timeout": 60}, 70)
        outcome: dict[str, Any] = reply["results"][0]
        if not outcome["ok"]:
            raise DeployError(f"task {task_id} failed: {outcome}\n{self.describe()}")
        return outcome

    # -- holds ----------------------------------------------------------------------------
    def wait_holder(
        self, name: str, condition: Callable[[HolderInfo], bool], what: str, timeout: float = 30
    ) -> HolderInfo:
        """Wait until lock ``name`` has a holder for which ``condition`` is true; that one."""
        found: list[HolderInfo] = []

        def held() -> bool:
            info = self.holder(name)
            if info is not None and condition(info):
                found.append(info)
                return True
            return False

        wait_for(held, timeout=timeout, what=what, services=self.services)
        return found[-1]

    def wait_free(self, name: str, timeout: float = 5) -> None:
        """Wait until lock ``name`` has no holder."""
        wait_for(
            lambda: self.holder(name) is None,
            timeout=timeout,
            what=f"lock {name!r} to be free",
            services=self.services,
        )


class UniqueDeployment(UniqueTasks, DbWorkerDeployment):
    """Two ``db_worker`` processes running unique tasks."""

    def rows(self, kind: str) -> dict[str, str]:
        """Every task of ``kind`` stored by the backend: its status, by task id."""
        query = f"SELECT id, status FROM {TABLE} WHERE task_path = ?"
        with contextlib.closing(sqlite3.connect(self.env["DRL_DEPLOY_DATABASE"], timeout=20)) as db:
            found = db.execute(query, (task_path(kind),)).fetchall()
            return {str(uuid.UUID(str(row[0]))): str(row[1]) for row in found}

    def wait_status(self, kind: str, task_id: str, status: str, timeout: float = 30) -> None:
        wait_for(
            lambda: self.rows(kind).get(task_id) == status,
            timeout=timeout,
            what=f"task {task_id} to be {status}",
            services=self.services,
        )

    def db_worker(self, pid: int | None) -> Service:
        """The ``db_worker`` process with this pid (the process that runs its tasks)."""
        for service in self.services:
            if service.pid == pid and service.label.startswith("db_worker"):
                return service
        raise DeployError(f"pid {pid} is no db_worker of {self}: {self.services}")


class UniqueCeleryDeployment(UniqueTasks, CeleryDeployment):
    """A Celery worker (prefork pool, two children) running unique tasks."""

    client_kind = "celery"

    def __init__(self, redis_url: str, workdir: Any, namespace: str) -> None:
        super().__init__("prefork", redis_url, workdir, namespace)

    def outcome(self, task_id: str, timeout: float = 60) -> dict[str, Any]:
        """The outcome of a task (``ok`` and ``value``, or ``error``) once it has one."""
        command = {"op": "wait", "ids": [task_id], "timeout": timeout}
        reply = self.client.request(command, timeout + 10)
        outcome: dict[str, Any] = reply["results"][0]
        return outcome

"""What every deployment offers the scenarios: calls of the project's decorated functions
through its server (HTTP requests or enqueued tasks), the lock's holder as Redis shows it, and
a SIGKILL for that holder.

The kinds of call are those of :mod:`tests.deploy.project.section`: ``locked`` (waits for the
lock), ``attempt`` and ``renewed`` (give up at once), ``bare`` (no lock).
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from django_redis_locks.core import Backend, HolderInfo, Lock
from django_redis_locks.inspection import get_lock
from tests.deploy.processes import DeployError, Service, wait_for


@dataclass
class Call:
    """What one call came to: it ran (``record``: its logged run), it was refused for the lock
    (a view's 409 with ``retry_after``, a task's SKIPPED), or it failed (``error``)."""

    record: dict[str, Any] | None = None
    refused: bool = False
    retry_after: int | None = None
    error: str | None = None

    @property
    def ran(self) -> bool:
        return self.record is not None


@dataclass
class Pending:
    """A call started in the background; ``sent_at`` is the test's monotonic clock."""

    handle: Any
    sent_at: float = field(default_factory=time.monotonic)


def new_namespace() -> str:
    """A key namespace of the deployment's own (the shared server is never flushed)."""
    return "t" + secrets.token_hex(4)


class Deployment(ABC):
    """A running deployment of the project: its servers, its run log, its Redis namespace."""

    #: Whether calls run in child processes of a server (gunicorn's workers, Celery's prefork
    #: pool) rather than in a server's main process.
    children_hold = False

    def __init__(
        self, server: str, pool: str, redis_url: str, workdir: Path, namespace: str
    ) -> None:
        self.server = server
        self.pool = pool
        self.workdir = workdir
        self.namespace = namespace
        self.log = workdir / "runs.jsonl"
        self.services: list[Service] = []
        self.figures: dict[str, Any] = {"server": server, "pool": pool}
        self.started_at = time.monotonic()
        self._client = redis.Redis.from_url(redis_url, socket_timeout=5)
        self.backend = Backend(self._client, namespace=namespace)
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.deploy.project.settings",
            "DRL_DEPLOY_REDIS_URL": redis_url,
            "DRL_DEPLOY_NAMESPACE": namespace,
            "DRL_DEPLOY_LOG": str(self.log),
            "DRL_DEPLOY_WORKER": self.label,
            "PYTHONUNBUFFERED": "1",
        }

    @property
    def label(self) -> str:
        return f"{self.server}-{self.pool}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.label}>"

    @abstractmethod
    def start(self) -> None:
        """Start the servers and wait until every worker serves."""

    # -- calls through the server -------------------------------------------------------------
    @abstractmethod
    def call_many(self, kind: str, name: str, count: int, seconds: float) -> list[Call]:
        """``count`` calls at once of the ``kind`` function on lock ``name``; their outcomes."""

    @abstractmethod
    def begin(self, kind: str, name: str, seconds: float) -> Pending:
        """Start one call in the background."""

    @abstractmethod
    def finish(self, pending: Pending, timeout: float) -> Call:
        """The outcome of a background call (an error if it has none within ``timeout``)."""

    @abstractmethod
    def attempt(self, name: str) -> Call:
        """One call of the non-blocking ``attempt`` function (an instant section)."""

    def probe(self, name: str) -> bool:
        """Whether another caller gets lock ``name`` now (taken and given back at once)."""
        lock = Lock(name, client=self.backend, timeout=1, blocking=False)
        if not lock.acquire():
            return False
        lock.release()
        return True

    # -- the lock as Redis has it -----------------------------------------------------------
    def holder(self, name: str) -> HolderInfo | None:
        return get_lock(name, client=self.backend)

    def wait_held(self, name: str, timeout: float = 20) -> HolderInfo:
        """Wait until lock ``name`` is held by a process of this deployment; its holder."""
        found: list[HolderInfo] = []

        def held() -> bool:
            info = self.holder(name)
            if info is None:
                return False
            found.append(info)
            return True

        wait_for(held, timeout=timeout, what=f"lock {name!r} to be held", services=self.services)
        info = found[-1]
        if info.pid is None or not self.owns(info.pid):
            raise DeployError(f"{name!r} is held by {info}, which is no process of {self}")
        return info

    # -- processes --------------------------------------------------------------------------
    def owns(self, pid: int) -> bool:
        return any(service.owns(pid) for service in self.services)

    def sigkill(self, pid: int) -> None:
        """SIGKILL ``pid``, which must be a process of this deployment."""
        if not self.owns(pid):
            raise DeployError(f"pid {pid} is no process of {self}: not killing it")
        os.kill(pid, signal.SIGKILL)

    def describe(self) -> str:
        return "\n".join(service.describe() for service in self.services)

    def close(self) -> None:
        for service in reversed(self.services):
            service.stop()
        self.backend.close()
        self._client.close()
        self.figures["wall_s"] = round(time.monotonic() - self.started_at, 2)

"""What a measurement gets to work with: the settings, the server, the worker pool."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.pool import WorkerPool
from benchmarks.server import BenchServer, CommandStats

__all__ = ["Context", "Settings"]


@dataclass(frozen=True)
class Settings:
    """The knobs of one run (see ``python -m benchmarks --help``)."""

    reps: int = 5
    contention_reps: int = 3
    cycles: int = 2000
    window: float = 2.0
    processes: tuple[int, ...] = (1, 2, 5, 10)
    blocking_processes: int = 10
    critical_us: int = 10
    handoff_rounds: int = 200
    hold_ms: tuple[float, float] = (5.0, 15.0)
    ttl: float = 10.0
    impls: tuple[str, ...] | None = None


@dataclass
class Context:
    """Settings plus the live resources of the run."""

    settings: Settings
    server: BenchServer
    pool: WorkerPool
    stats: CommandStats
    log: Callable[[str], None]
    trial: int = 0

    def lock_name(self, label: str) -> str:
        """A fresh lock name per trial, so no trial sees another's keys."""
        self.trial += 1
        return f"bench:{label}:{self.trial}"

    def flush(self) -> None:
        """Empty the database between trials (outside every measured window)."""
        with self.server.client() as client:
            client.flushall()

    def base_params(self, impl: str, name: str) -> dict[str, object]:
        return {
            "impl": impl,
            "host": self.server.host,
            "port": self.server.port,
            "name": name,
            "ttl": self.settings.ttl,
        }

"""Where the test tiers keep what they measured (and the admin tests their screenshots,
under ``ARTIFACTS``): one JSON object per line in
``$DRL_ARTIFACTS/<tier>-figures.json`` (default ``test-artifacts/``), each stamped with the
run, the time, the server binary, the Python and the CPU count, for CI to keep."""

from __future__ import annotations

import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.harness.servers import find_server_binary

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("DRL_ARTIFACTS") or ROOT / "test-artifacts")


class FiguresFile:
    """The figures file of one tier; ``written`` holds this run's records, for the summary."""

    def __init__(self, tier: str, *, server_key: str = "server") -> None:
        self.path = ARTIFACTS / f"{tier}-figures.json"
        self.run = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"
        self.server_key = server_key  # the key naming the Redis server binary
        self.written: list[dict[str, Any]] = []

    def append(self, record: dict[str, Any]) -> None:
        """Stamp ``record`` and append it as one line."""
        stamped = {
            **record,
            "run": self.run,
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            self.server_key: str(find_server_binary()),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        }
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(stamped) + "\n")
        self.written.append(stamped)

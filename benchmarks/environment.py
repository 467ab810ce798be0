"""What the numbers were measured on: machine, Python, client libraries, server, command."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["describe", "load_average"]

_PACKAGES = (
    "django-redis-locks",
    "redis",
    "hiredis",
    "python-redis-lock",
    "pottery",
    "matplotlib",
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git_revision() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev + (" (with uncommitted changes)" if dirty else "")


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def command_line(argv: list[str]) -> str:
    """The command as typed: ``bin/bench ...`` when launched by it, else ``python -m``."""
    launcher = os.environ.get("DRL_BENCH_LAUNCHER", "python -m benchmarks")
    return " ".join([launcher, *(shlex.quote(a) for a in argv)])


def describe(argv: list[str], server_flavour: str, server_version: str) -> dict[str, Any]:
    """Everything the results file records about where and how it was measured."""
    hiredis = _version("hiredis")
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command_line(argv),
        "git": _git_revision(),
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
        "packages": {name: _version(name) for name in _PACKAGES},
        "hiredis": f"yes ({hiredis})" if hiredis else "no (pure-Python parser)",
        "server": f"{server_flavour} {server_version}, TCP on 127.0.0.1, no persistence",
        "load_average_before": load_average(),
    }

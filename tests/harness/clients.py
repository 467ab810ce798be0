"""The client library of the clients the suite hands to the library: redis-py by default,
valkey-py with ``DRL_TEST_CLIENT=valkey`` (the library must behave the same with either).
Clients the tests use only to look at the data stay redis-py."""

from __future__ import annotations

import importlib
import os
from typing import Any

CLIENT = os.environ.get("DRL_TEST_CLIENT", "redis")
if CLIENT not in ("redis", "valkey"):
    raise RuntimeError(f"DRL_TEST_CLIENT must be redis or valkey, not {CLIENT!r}")

_PREFIX = "Valkey" if CLIENT == "valkey" else "Redis"


def _module(name: str) -> Any:
    return importlib.import_module(f"{CLIENT}{name}")


def sync_from_url(url: str, **kwargs: Any) -> Any:
    """A sync client of the run's library for ``url``."""
    return getattr(_module(""), _PREFIX).from_url(url, **kwargs)


def async_from_url(url: str, **kwargs: Any) -> Any:
    """An asyncio client of the run's library for ``url``."""
    return getattr(_module(".asyncio"), _PREFIX).from_url(url, **kwargs)


def cluster(startup_nodes: list[tuple[str, int]], **kwargs: Any) -> Any:
    """A sync cluster client of the run's library."""
    module = _module(".cluster")
    nodes = [module.ClusterNode(host, port) for host, port in startup_nodes]
    return getattr(module, f"{_PREFIX}Cluster")(startup_nodes=nodes, **kwargs)


def async_cluster(startup_nodes: list[tuple[str, int]], **kwargs: Any) -> Any:
    """An asyncio cluster client of the run's library."""
    module = _module(".asyncio.cluster")
    nodes = [module.ClusterNode(host, port) for host, port in startup_nodes]
    return getattr(module, f"{_PREFIX}Cluster")(startup_nodes=nodes, **kwargs)

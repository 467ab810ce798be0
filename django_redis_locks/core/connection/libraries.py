"""The client libraries the core drives: redis-py and valkey-py.

valkey-py is a fork of redis-py with the same API under other names (``valkey.Valkey``,
``valkey.exceptions.ValkeyError``...). A client's library is told by the package its class
comes from; everything the core needs from a library (its errors, its client, pool and
connection classes, a retry policy) comes from the :class:`ClientLibrary` for it, so no other
module names one. valkey-py is optional: it is looked at only once it has been imported
(a valkey client cannot exist before).
"""

from __future__ import annotations

import importlib
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from django_redis_locks.core.runtime.resends import noting

__all__ = [
    "ClientLibrary",
    "backend_errors",
    "library_of",
    "no_script_errors",
    "node_client",
]

#: The packages supported, with the name users know them by.
_PACKAGES = {"redis": "redis-py", "valkey": "valkey-py"}
#: Connection classes whose settings can be carried from sync to asyncio and back.
_CONNECTION_CLASSES = ("Connection", "SSLConnection", "UnixDomainSocketConnection")


@dataclass(frozen=True, slots=True)
class ClientLibrary:
    """What the core uses of one client library."""

    name: str  # as users know it: "redis-py"
    package: str  # as Python imports it: "redis"
    version: str
    error: type[Exception]  # the base of every error the library raises
    no_script: type[Exception]
    connection_error: type[Exception]
    sync_client: Any
    async_client: Any
    sync_cluster: Any
    async_cluster: Any
    sync_pool: Any
    async_pool: Any
    sync_blocking_pool: Any
    async_blocking_pool: Any
    sync_sentinel: Any  # the Sentinel manager
    async_sentinel: Any
    sync_sentinel_pool: Any
    async_sentinel_pool: Any
    sync_cluster_node: Any
    async_cluster_node: Any
    # (classes typed Any: the libraries' own types are not all annotated)
    #: connection class name -> (sync class, asyncio class)
    connections: dict[str, tuple[type, type]] = field(default_factory=dict)
    #: Sentinel-managed connection classes: plain and TLS, (sync class, asyncio class) each
    sentinel_connections: tuple[tuple[type, type], tuple[type, type]] = ((type, type),) * 2
    _retry: tuple[Any, Any, Any] = (None, None, None)  # sync Retry, asyncio Retry, NoBackoff

    def retry(self, *, asyncio: bool) -> Any:
        """One immediate retry after a broken connection (the server restarted and a pooled
        socket is dead), never after a timeout: a stalled server costs one socket timeout.
        The retry is counted (see :mod:`..runtime.resends`): the first copy may still reach
        Redis."""
        sync_retry, async_retry, no_backoff = self._retry
        retry_class = async_retry if asyncio else sync_retry
        return retry_class(no_backoff(), 1, supported_errors=(self.connection_error,))

    def retry_settings(self, *, asyncio: bool) -> dict[str, Any]:
        """The connection settings that give a client :meth:`retry`: the policy, and its
        errors as ``retry_on_error`` too (redis-py 5 and valkey-py retry a command only after
        an error named there, whatever the policy's own errors)."""
        return {"retry": self.retry(asyncio=asyncio), "retry_on_error": [self.connection_error]}

    def twin_connection_class(self, connection_class: type, *, to_async: bool) -> type | None:
        """The asyncio (or sync) twin of ``connection_class``: None if it has none."""
        for klass in connection_class.__mro__:
            pair = self.connections.get(klass.__name__)
            if pair is not None and klass in pair:
                return pair[1] if to_async else pair[0]
        return None


def _load(package: str) -> ClientLibrary:
    module = importlib.import_module(package)
    asyncio_module = importlib.import_module(f"{package}.asyncio")
    exceptions = importlib.import_module(f"{package}.exceptions")
    connection = importlib.import_module(f"{package}.connection")
    async_connection = importlib.import_module(f"{package}.asyncio.connection")
    cluster = importlib.import_module(f"{package}.cluster")
    async_cluster = importlib.import_module(f"{package}.asyncio.cluster")
    sentinel = importlib.import_module(f"{package}.sentinel")
    async_sentinel = importlib.import_module(f"{package}.asyncio.sentinel")
    retry = importlib.import_module(f"{package}.retry")
    async_retry = importlib.import_module(f"{package}.asyncio.retry")
    backoff = importlib.import_module(f"{package}.backoff")
    prefix = "Valkey" if package == "valkey" else "Redis"
    return ClientLibrary(
        name=_PACKAGES[package],
        package=package,
        version=str(getattr(module, "__version__", "?")),
        error=getattr(exceptions, f"{prefix}Error"),
        no_script=exceptions.NoScriptError,
        connection_error=exceptions.ConnectionError,
        sync_client=getattr(module, prefix),
        async_client=getattr(asyncio_module, prefix),
        sync_cluster=getattr(cluster, f"{prefix}Cluster"),
        async_cluster=getattr(async_cluster, f"{prefix}Cluster"),
        sync_pool=connection.ConnectionPool,
        async_pool=async_connection.ConnectionPool,
        sync_blocking_pool=connection.BlockingConnectionPool,
        async_blocking_pool=async_connection.BlockingConnectionPool,
        sync_sentinel=sentinel.Sentinel,
        async_sentinel=async_sentinel.Sentinel,
        sync_sentinel_pool=sentinel.SentinelConnectionPool,
        async_sentinel_pool=async_sentinel.SentinelConnectionPool,
        sync_cluster_node=cluster.ClusterNode,
        async_cluster_node=async_cluster.ClusterNode,
        sentinel_connections=(
            (sentinel.SentinelManagedConnection, async_sentinel.SentinelManagedConnection),
            (sentinel.SentinelManagedSSLConnection, async_sentinel.SentinelManagedSSLConnection),
        ),
        connections={
            name: (getattr(connection, name), getattr(async_connection, name))
            for name in _CONNECTION_CLASSES
        },
        _retry=(noting(retry.Retry), noting(async_retry.Retry), backoff.NoBackoff),
    )


_loaded: dict[str, ClientLibrary] = {}
_errors: tuple[type[Exception], ...] = ()
_no_script: tuple[type[Exception], ...] = ()
_mutex = threading.Lock()


def _library(package: str) -> ClientLibrary:
    library = _loaded.get(package)
    if library is None:
        global _errors, _no_script
        with _mutex:
            library = _loaded.get(package)
            if library is None:
                library = _loaded[package] = _load(package)
                _errors = (*_errors, library.error)
                _no_script = (*_no_script, library.no_script)
    return library


def _refresh() -> None:
    """Take in valkey-py once it has been imported (redis-py is always there)."""
    for package in _PACKAGES:
        if package not in _loaded and (package == "redis" or package in sys.modules):
            _library(package)


def library_of(client: object) -> ClientLibrary | None:
    """The library ``client`` (or a client class) comes from; None for any other object."""
    klass = client if isinstance(client, type) else type(client)
    for base in klass.__mro__:
        package = base.__module__.partition(".")[0]
        if package in _PACKAGES:
            return _library(package)
    return None


def node_client(node: Any) -> Any:
    """The client of one node of a cluster client: ``redis_connection`` in redis-py,
    ``valkey_connection`` in valkey-py."""
    library = library_of(node)
    return getattr(node, f"{library.package if library is not None else 'redis'}_connection")


def backend_errors() -> tuple[type[Exception], ...]:
    """The base error classes of the libraries in use: what a failed Redis call raises."""
    if len(_loaded) < len(_PACKAGES):
        _refresh()
    return _errors


def no_script_errors() -> tuple[type[Exception], ...]:
    """The NOSCRIPT error classes of the libraries in use."""
    if len(_loaded) < len(_PACKAGES):
        _refresh()
    return _no_script

"""The clients the core builds from the one it is given: a bounded sibling, and sync and
asyncio twins.

Background work (the renewer, the wake-up listener) runs in threads with a sync client; async
callers run their scripts on an asyncio client bound to their event loop. Given one of the
two, this module builds the other, and a sibling of a plain client whose calls fail within one
socket timeout. Every connection setting the given client was configured with (TLS included)
reaches the clients built here; one that the other kind of connection cannot honour is
refused with :class:`LockConfigurationError`, never dropped.
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

from .errors import LockConfigurationError
from .libraries import ClientLibrary, library_of

__all__ = [
    "bounded_client",
    "connection_settings",
    "derive_async",
    "derive_sync",
    "is_async_client",
    "is_cluster_client",
    "is_standard_async_client",
]

#: Connection settings each client makes for itself rather than copy: the retry policy
#: (replaced by the library's bounded one) and redis-py's per-pool machinery.
_OWN = frozenset(
    {
        "retry",
        "retry_on_timeout",
        "retry_on_error",
        "connection_pool",
        "event_dispatcher",
        "maint_notifications_pool_handler",
        "oss_cluster_maint_notifications_handler",
        "maintenance_state",
        "maintenance_notification_hash",
        "himport_registry",
        "orig_host_address",
        "orig_socket_timeout",
        "orig_socket_connect_timeout",
        "cache",  # client-side caching (RESP3) serves reads; locks run scripts only
        "cache_config",
    }
)
#: Settings that name sync or asyncio machinery (a parser, a connect hook): a twin of the
#: other kind picks its own.
_ONE_SIDED = frozenset(
    {"parser_class", "redis_connect_func", "command_packer", "encoder_class", "connection_class"}
)
#: Larger pools are unbounded in effect (redis-py before 8 defaults to 2**31): a sibling of
#: one is unbounded too, and never waits for a connection.
_BOUNDED_POOL_LIMIT = 100_000


@cache
def _accepted(target: type) -> frozenset[str]:
    """The keyword arguments ``target`` (a connection or cluster class) takes."""
    names: set[str] = set()
    for klass in target.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        parameters = inspect.signature(init).parameters.values()
        names.update(
            p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        )
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return frozenset(names)


def _unset(value: object) -> bool:
    return value is None or value is False or value in ((), [], {}, "")


def connection_settings(
    settings: dict[str, Any], target: type, *, source: str, across: bool = False
) -> dict[str, Any]:
    """The settings of ``source`` (a client's connection kwargs) that a ``target``
    connection (or cluster client) class takes, without those each client makes for itself.

    Raises LockConfigurationError for a setting that was set but ``target`` cannot take
    (for example redis-py's OCSP checks, which its asyncio connections do not offer).
    ``across``: ``target`` is of the other kind (sync for asyncio settings, or the reverse).
    """
    accepted = _accepted(target)
    carried: dict[str, Any] = {}
    for key, value in settings.items():
        if key in _OWN or (across and key in _ONE_SIDED):
            continue
        if key in accepted:
            carried[key] = value
        elif not _unset(value):
            raise LockConfigurationError(
                f"{source} is configured with {key}={value!r}, which a "
                f"{target.__module__}.{target.__qualname__} cannot honour; give the library "
                "both clients (Backend(async_client_factory=...), or a ClientFactory with "
                "get_async_client) instead of one to derive the other from"
            )
    return carried


def _pool(
    library: ClientLibrary,
    template: Any,
    settings: dict[str, Any],
    *,
    to_async: bool,
    connection_class: type,
) -> Any:
    """A pool as large as ``template`` whose calls wait for a free connection (as long as the
    template would wait if it blocks, else a socket timeout) rather than fail with "Too many
    connections"; for an unbounded template, an unbounded pool that never waits."""
    size = template.max_connections
    if size > _BOUNDED_POOL_LIMIT:
        plain = library.async_pool if to_async else library.sync_pool
        return plain(max_connections=size, connection_class=connection_class, **settings)
    blocks = isinstance(template, library.sync_blocking_pool | library.async_blocking_pool)
    wait = template.timeout if blocks else None
    if wait is None:
        wait = settings.get("socket_timeout")
    blocking = library.async_blocking_pool if to_async else library.sync_blocking_pool
    return blocking(
        max_connections=size, timeout=wait, connection_class=connection_class, **settings
    )


def _standard_pool(library: ClientLibrary, client: Any, *, asyncio: bool) -> bool:
    """``client`` is a plain client on a standard pool of standard connections: its settings
    can be copied to sibling clients."""
    pools = (
        (library.async_pool, library.async_blocking_pool)
        if asyncio
        else (library.sync_pool, library.sync_blocking_pool)
    )
    pool = client.connection_pool
    side = 1 if asyncio else 0
    return type(pool) in pools and any(
        pool.connection_class is pair[side] for pair in library.connections.values()
    )


def bounded_client(client: Any) -> Any:
    """A client on the same server as ``client`` whose calls fail within one socket timeout.

    redis-py retries timed-out commands with back-off by default (10 times in redis-py 8), so
    a paused server would block a lock call for a minute. For a plain client (redis-py's
    ``Redis``, valkey-py's ``Valkey``) on a standard pool this returns a sibling client with
    the same settings and a bounded retry policy, on its own pool (lock traffic then never
    waits for cache traffic). Other clients (Sentinel, Cluster, custom pools) are returned
    unchanged: their own retry settings apply.

    The sibling's pool has the same size but blocks when full: a call waits (up to a socket
    timeout) for a free connection instead of failing with "Too many connections" (redis-py
    8's pools hold 100 connections by default), so a thousand callers blocked in one process
    share the pool's connections.
    """
    library = library_of(client)
    if library is None or type(client) is not library.sync_client:
        return client
    if not _standard_pool(library, client, asyncio=False):
        return client
    pool = client.connection_pool
    settings = connection_settings(
        pool.connection_kwargs, pool.connection_class, source=_describe(client)
    )
    settings.update(library.retry_settings(asyncio=False))
    new_pool = _pool(
        library, pool, settings, to_async=False, connection_class=pool.connection_class
    )
    return library.sync_client.from_pool(new_pool)


def is_standard_async_client(client: object) -> bool:
    """A plain asyncio client on a standard pool: its settings can be copied to siblings."""
    library = library_of(client)
    return (
        library is not None
        and type(client) is library.async_client
        and _standard_pool(library, client, asyncio=True)
    )


def is_async_client(client: object) -> bool:
    library = library_of(client)
    return library is not None and isinstance(client, library.async_client | library.async_cluster)


def is_cluster_client(client: object) -> bool:
    library = library_of(client)
    return library is not None and isinstance(client, library.sync_cluster | library.async_cluster)


def _describe(client: Any) -> str:
    return f"the {type(client).__module__}.{type(client).__qualname__} client"


def _library(client: Any, what: str) -> ClientLibrary:
    library = library_of(client)
    if library is None:
        raise LockConfigurationError(
            f"expected a redis-py or valkey-py {what} client, got {type(client).__name__}"
        )
    return library


def derive_async(client: Any) -> Any:
    """A new asyncio client with the connection settings of the sync ``client``."""
    library = _library(client, "sync")
    if isinstance(client, library.sync_cluster):
        node = client.get_default_node()
        pool = node.redis_connection.connection_pool
        settings = connection_settings(
            _cluster_settings(pool.connection_kwargs, pool.connection_class, library),
            library.async_cluster,
            source=_describe(client),
            across=True,
        )
        return library.async_cluster(host=node.host, port=node.port, **settings)
    if isinstance(client, library.sync_client):
        return _plain_twin(library, client, to_async=True)
    raise LockConfigurationError(
        f"expected a {library.name} sync client or cluster client, got {type(client).__name__}"
    )


def derive_sync(client: Any) -> Any:
    """A new sync client with the connection settings of the asyncio ``client``."""
    library = _library(client, "asyncio")
    if isinstance(client, library.async_cluster):
        # Before its first command an asyncio cluster client knows only its startup nodes.
        startup = next(iter(client.nodes_manager.startup_nodes.values()))
        node = client.get_default_node() or startup
        settings = _cluster_settings(
            client.connection_kwargs, client.connection_kwargs["connection_class"], library
        )
        twin = library.twin_connection_class(
            client.connection_kwargs["connection_class"], to_async=False
        )
        if twin is None:
            raise LockConfigurationError(
                _no_twin(client.connection_kwargs["connection_class"], "sync")
            )
        ssl = settings.pop("ssl", False)
        settings = connection_settings(settings, twin, source=_describe(client), across=True)
        return library.sync_cluster(host=node.host, port=node.port, ssl=ssl, **settings)
    if isinstance(client, library.async_client):
        return _plain_twin(library, client, to_async=False)
    raise LockConfigurationError(
        f"expected a {library.name} asyncio client or cluster client, got {type(client).__name__}"
    )


def _plain_twin(library: ClientLibrary, client: Any, *, to_async: bool) -> Any:
    """The asyncio (or sync) twin of a plain client, on a pool of its own as large as the
    client's, with the same settings and the bounded retry policy."""
    pool = client.connection_pool
    connection_class = library.twin_connection_class(pool.connection_class, to_async=to_async)
    if connection_class is None:
        raise LockConfigurationError(
            _no_twin(pool.connection_class, "asyncio" if to_async else "sync")
        )
    settings = connection_settings(
        pool.connection_kwargs, connection_class, source=_describe(client), across=True
    )
    settings.update(library.retry_settings(asyncio=to_async))
    # from_pool: the client owns the pool, so closing the client closes its connections; a
    # full pool makes calls wait for a connection (see bounded_client)
    twin = library.async_client if to_async else library.sync_client
    return twin.from_pool(
        _pool(library, pool, settings, to_async=to_async, connection_class=connection_class)
    )


#: Settings a cluster client makes for each node itself.
_CLUSTER_OWN = frozenset(
    {
        "host",
        "port",
        "db",
        "path",
        "connection_class",
        "max_connections",
        "redis_connect_func",
        "response_callbacks",
    }
)


def _cluster_settings(
    settings: dict[str, Any], connection_class: type, library: ClientLibrary
) -> dict[str, Any]:
    """A cluster node's connection settings as cluster client arguments: TLS is ``ssl=True``
    (a cluster client picks its connection class from it)."""
    carried = {key: value for key, value in settings.items() if key not in _CLUSTER_OWN}
    ssl_classes = library.connections["SSLConnection"]
    if issubclass(connection_class, ssl_classes):
        carried["ssl"] = True
    return carried


def _no_twin(connection_class: type, kind: str) -> str:
    return (
        f"cannot derive a {kind} client from a pool of {connection_class.__name__}; "
        "pass both clients explicitly"
    )

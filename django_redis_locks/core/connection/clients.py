"""The clients the core builds from the one it is given: a bounded sibling, and sync and
asyncio twins.

Background work (the renewer, the wake-up listener) runs in threads with a sync client; async
callers run their scripts on an asyncio client bound to their event loop. Given one of the
two, this module builds the other, and a sibling of the given client whose calls fail within
a bounded time: one socket timeout for a single server, about two for a Sentinel-managed
primary (:mod:`.sentinels`) or a Cluster (:mod:`.clusters`). Every connection setting the
given client was configured with (TLS included) reaches the clients built here; one that the
other kind of connection cannot honour is refused with :class:`LockConfigurationError`, never
dropped (see :mod:`.client_settings`).
"""

from __future__ import annotations

from typing import Any

from django_redis_locks.core.errors import LockConfigurationError

from . import clusters
from .client_settings import connection_settings, describe, pool_bounds
from .interruptions import guarded_pool, unguarded
from .libraries import ClientLibrary, library_of
from .sentinels import is_sentinel_client, sentinel_client

__all__ = [
    "bounded_client",
    "connection_settings",
    "derive_async",
    "derive_sync",
    "is_async_client",
    "is_cluster_client",
    "is_standard_async_client",
]


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
    connections"; for an unbounded template, an unbounded pool that never waits. A sync pool
    never hands out a connection an interrupted call left with a reply unread (see
    :mod:`.interruptions`)."""
    size, wait, bounded = pool_bounds(library, template, settings)
    if not bounded:
        plain = library.async_pool if to_async else guarded_pool(library.sync_pool)
        return plain(max_connections=size, connection_class=connection_class, **settings)
    blocking = library.async_blocking_pool if to_async else guarded_pool(library.sync_blocking_pool)
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
    return unguarded(type(pool)) in pools and any(
        pool.connection_class is pair[side] for pair in library.connections.values()
    )


def bounded_client(client: Any) -> Any:
    """A client on the same server as ``client`` whose calls fail within a bounded time.

    redis-py retries timed-out commands with back-off by default (10 times in redis-py 8), so
    a paused server would block a lock call for a minute. For a plain client (redis-py's
    ``Redis``, valkey-py's ``Valkey``) on a standard pool this returns a sibling client with
    the same settings and a bounded retry policy, on its own pool (lock traffic then never
    waits for cache traffic): a call fails within one socket timeout. A client on a Sentinel
    pool gets a sibling on the same service (see :mod:`.sentinels`), a cluster client one on
    the same nodes (see :mod:`.clusters`): a call fails within about two socket timeouts.
    Other clients (custom pools or connections) are returned unchanged: their own retry
    settings apply.

    The sibling's pool has the same size but blocks when full: a call waits (up to a socket
    timeout) for a free connection instead of failing with "Too many connections" (redis-py
    8's pools hold 100 connections by default), so a thousand callers blocked in one process
    share the pool's connections.
    """
    library = library_of(client)
    if library is None:
        return client
    if isinstance(client, library.sync_cluster):
        return clusters.bounded_cluster(library, client)
    if type(client) is not library.sync_client:
        return client
    if is_sentinel_client(library, client):
        return sentinel_client(library, client, to_async=False)
    if not _standard_pool(library, client, asyncio=False):
        return client
    pool = client.connection_pool
    settings = connection_settings(
        pool.connection_kwargs, pool.connection_class, source=describe(client)
    )
    settings.update(library.retry_settings(asyncio=False))
    new_pool = _pool(
        library, pool, settings, to_async=False, connection_class=pool.connection_class
    )
    return library.sync_client.from_pool(new_pool)


def is_standard_async_client(client: object) -> bool:
    """An asyncio client whose settings can be copied to siblings: a plain client on a
    standard or a Sentinel pool."""
    library = library_of(client)
    return (
        library is not None
        and type(client) is library.async_client
        and (_standard_pool(library, client, asyncio=True) or is_sentinel_client(library, client))
    )


def is_async_client(client: object) -> bool:
    library = library_of(client)
    return library is not None and isinstance(client, library.async_client | library.async_cluster)


def is_cluster_client(client: object) -> bool:
    library = library_of(client)
    return library is not None and isinstance(client, library.sync_cluster | library.async_cluster)


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
        return clusters.async_cluster(library, client)
    if isinstance(client, library.sync_client):
        if is_sentinel_client(library, client):
            return sentinel_client(library, client, to_async=True)
        return _plain_twin(library, client, to_async=True)
    raise LockConfigurationError(
        f"expected a {library.name} sync client or cluster client, got {type(client).__name__}"
    )


def derive_sync(client: Any) -> Any:
    """A new sync client with the connection settings of the asyncio ``client``."""
    library = _library(client, "asyncio")
    if isinstance(client, library.async_cluster):
        return clusters.sync_twin(library, client)
    if isinstance(client, library.async_client):
        if is_sentinel_client(library, client):
            return sentinel_client(library, client, to_async=False)
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
        pool.connection_kwargs, connection_class, source=describe(client), across=True
    )
    settings.update(library.retry_settings(asyncio=to_async))
    # from_pool: the client owns the pool, so closing the client closes its connections; a
    # full pool makes calls wait for a connection (see bounded_client)
    twin = library.async_client if to_async else library.sync_client
    return twin.from_pool(
        _pool(library, pool, settings, to_async=to_async, connection_class=connection_class)
    )


def _no_twin(connection_class: type, kind: str) -> str:
    return (
        f"cannot derive a {kind} client from a pool of {connection_class.__name__}; "
        "pass both clients explicitly"
    )

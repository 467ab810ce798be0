"""Make the sync twin of an asyncio redis-py client, and the other way round.

Background work (the renewer, the wake-up listener) runs in threads with a sync client; async
callers run their scripts on an asyncio client bound to their event loop. Given one of the
two, this module builds the other from the same connection settings.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.cluster
import redis.retry
from redis.backoff import NoBackoff

from .errors import LockConfigurationError

__all__ = [
    "bounded_client",
    "derive_async",
    "derive_sync",
    "is_async_client",
    "is_cluster_client",
]

# Connection settings that mean the same to sync and asyncio connections.
_PORTABLE_KWARGS = (
    "host",
    "port",
    "path",
    "db",
    "username",
    "password",
    "credential_provider",
    "socket_timeout",
    "socket_connect_timeout",
    "socket_keepalive",
    "socket_keepalive_options",
    "retry_on_timeout",
    "encoding",
    "encoding_errors",
    "decode_responses",
    "client_name",
    "health_check_interval",
    "protocol",
    "ssl_keyfile",
    "ssl_certfile",
    "ssl_cert_reqs",
    "ssl_ca_certs",
    "ssl_ca_data",
    "ssl_check_hostname",
    "ssl_ciphers",
    "ssl_min_version",
)

_CONNECTION_CLASSES = {
    "Connection": (redis.connection.Connection, redis.asyncio.connection.Connection),
    "SSLConnection": (redis.connection.SSLConnection, redis.asyncio.connection.SSLConnection),
    "UnixDomainSocketConnection": (
        redis.connection.UnixDomainSocketConnection,
        redis.asyncio.connection.UnixDomainSocketConnection,
    ),
}


def _sync_retry() -> redis.retry.Retry:
    # One immediate retry after a broken connection (e.g. the server restarted and the pooled
    # socket is dead); never after a timeout, so a stalled server costs one socket timeout.
    return redis.retry.Retry(NoBackoff(), 1, supported_errors=(redis.exceptions.ConnectionError,))


def _async_retry() -> redis.asyncio.retry.Retry:
    return redis.asyncio.retry.Retry(
        NoBackoff(), 1, supported_errors=(redis.exceptions.ConnectionError,)
    )


# Pools that make a call wait for a free connection when all are in use (untyped in redis-py).
_SyncBlockingPool: Any = redis.BlockingConnectionPool
_AsyncBlockingPool: Any = redis.asyncio.BlockingConnectionPool


def _blocking_pool(pool_class: Any, template: Any, kwargs: dict[str, Any], **more: Any) -> Any:
    """A pool of ``pool_class`` as large as the ``template`` pool, whose calls wait for a free
    connection, as long as the template would wait if it blocks, else a socket timeout."""
    blocks = isinstance(template, _SyncBlockingPool | _AsyncBlockingPool)
    wait = template.timeout if blocks else None
    if wait is None:
        wait = kwargs.get("socket_timeout")
    return pool_class(max_connections=template.max_connections, timeout=wait, **more, **kwargs)


def bounded_client(client: Any) -> Any:
    """A client on the same server as ``client`` whose calls fail within one socket timeout.

    redis-py retries timed-out commands with back-off by default (10 times in redis-py 8), so
    a paused server would block a lock call for a minute. For a plain ``Redis`` on a standard
    pool this returns a sibling client with the same settings and a bounded retry policy, on
    its own pool (lock traffic then never waits for cache traffic). Other clients (Sentinel,
    Cluster, custom pools) are returned unchanged: their own retry settings apply.

    The sibling's pool has the same size but blocks when full: a call waits (up to a socket
    timeout) for a free connection instead of failing with "Too many connections" (redis-py's
    pools hold 100 connections by default), so a thousand callers blocked in one process
    share the pool's connections.
    """
    if type(client) is not redis.Redis:
        return client
    pool = client.connection_pool
    if type(pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool):
        return client
    if pool.connection_class.__name__ not in _CONNECTION_CLASSES:
        return client
    kwargs = _portable(pool.connection_kwargs)
    kwargs["retry"] = _sync_retry()
    kwargs.pop("retry_on_timeout", None)
    new_pool = _blocking_pool(
        _SyncBlockingPool, pool, kwargs, connection_class=pool.connection_class
    )
    return redis.Redis.from_pool(new_pool)


def is_standard_async_client(client: object) -> bool:
    """An asyncio ``Redis`` on a standard pool: its settings can be copied to sibling clients."""
    return (
        type(client) is redis.asyncio.Redis
        and type(client.connection_pool) is redis.asyncio.ConnectionPool
        and client.connection_pool.connection_class.__name__ in _CONNECTION_CLASSES
    )


def is_async_client(client: object) -> bool:
    return isinstance(client, redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster)


def is_cluster_client(client: object) -> bool:
    return isinstance(client, redis.cluster.RedisCluster | redis.asyncio.cluster.RedisCluster)


def _portable(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {key: kwargs[key] for key in _PORTABLE_KWARGS if key in kwargs}


def _twin_class(connection_class: type, to_async: bool) -> type:
    for name in type.mro(connection_class):
        pair = _CONNECTION_CLASSES.get(name.__name__)
        if pair is not None:
            return pair[1] if to_async else pair[0]
    raise LockConfigurationError(
        f"cannot derive a {'asyncio' if to_async else 'sync'} client from a pool of "
        f"{connection_class.__name__}; pass both clients explicitly"
    )


def derive_async(client: Any) -> Any:
    """A new asyncio client with the connection settings of the sync ``client``."""
    if isinstance(client, redis.cluster.RedisCluster):
        node = client.get_default_node()  # type: ignore[no-untyped-call]
        kwargs = _portable(node.redis_connection.connection_pool.connection_kwargs)
        kwargs.pop("db", None)
        kwargs.update(host=node.host, port=node.port)
        return redis.asyncio.cluster.RedisCluster(**kwargs)
    if isinstance(client, redis.Redis):
        pool = client.connection_pool
        kwargs = _portable(pool.connection_kwargs)
        connection_class = _twin_class(pool.connection_class, to_async=True)
        kwargs["retry"] = _async_retry()
        kwargs.pop("retry_on_timeout", None)
        # from_pool: the client owns the pool, so closing the client closes its connections;
        # a full pool makes calls wait for a connection (see bounded_client)
        return redis.asyncio.Redis.from_pool(
            _blocking_pool(_AsyncBlockingPool, pool, kwargs, connection_class=connection_class)
        )
    raise LockConfigurationError(
        f"expected a redis-py Redis or RedisCluster client, got {type(client).__name__}"
    )


def derive_sync(client: Any) -> Any:
    """A new sync client with the connection settings of the asyncio ``client``."""
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        # Before its first command an asyncio cluster client knows only its startup nodes.
        startup = next(iter(client.nodes_manager.startup_nodes.values()))
        node = client.get_default_node() or startup
        kwargs = _portable(client.connection_kwargs)
        kwargs.pop("db", None)
        kwargs.update(host=node.host, port=node.port)
        return redis.cluster.RedisCluster(**kwargs)
    if isinstance(client, redis.asyncio.Redis):
        pool = client.connection_pool
        kwargs = _portable(pool.connection_kwargs)
        connection_class = _twin_class(pool.connection_class, to_async=False)
        kwargs["retry"] = _sync_retry()
        kwargs.pop("retry_on_timeout", None)
        return redis.Redis.from_pool(
            _blocking_pool(_SyncBlockingPool, pool, kwargs, connection_class=connection_class)
        )
    raise LockConfigurationError(
        f"expected a redis-py asyncio Redis or RedisCluster client, got {type(client).__name__}"
    )

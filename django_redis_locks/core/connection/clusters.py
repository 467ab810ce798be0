"""Cluster clients the library builds: a bounded sibling, and sync and asyncio twins.

A cluster client retries a failed command with back-off (redis-py 8: ten times, up to 10 s
apart), and its node pools fail with "Too many connections" when full. The library uses a
sibling of the given cluster client (same nodes, same connection settings) that retries once,
at once, after refreshing the slot map (a master that failed over is found at its new
address), and whose node pools, as large as the given client's, make a call wait for a free
connection. A call on a stalled or dead master then fails within about two socket timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import Any

from django_redis_locks.core.errors import LockConfigurationError

from .client_settings import connection_settings, describe, pool_bounds
from .interruptions import guarded_pool
from .libraries import ClientLibrary, node_client

__all__ = ["async_cluster", "bounded_cluster", "sync_cluster"]

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
        "valkey_connect_func",  # (valkey-py's name for it)
        "response_callbacks",
    }
)


def _carried(settings: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in settings.items() if key not in _CLUSTER_OWN}


def _nodes(client: Any) -> list[tuple[str, int]]:
    """Every node ``client`` knows (sync or asyncio), its startup nodes first."""
    startup = list(client.nodes_manager.startup_nodes.values())
    known = list(client.get_nodes()) if client.nodes_manager.nodes_cache else []
    seen: dict[tuple[str, int], None] = {}
    for node in [*startup, *known]:
        seen[(node.host, int(node.port))] = None
    return list(seen)


def _retry(library: ClientLibrary, *, asyncio: bool) -> dict[str, Any]:
    """The bounded retry of a cluster client: one retry, after a slot-map refresh. redis-py 6
    and later count a cluster client's attempts from its retry policy; redis-py 5 and
    valkey-py from ``cluster_error_retry_attempts`` (3 by default), set to 1 here."""
    retry = library.retry(asyncio=asyncio)
    if hasattr(retry, "get_retries"):
        return {"retry": retry}
    return {"retry": retry, "cluster_error_retry_attempts": 1}


def bounded_cluster(library: ClientLibrary, client: Any) -> Any:
    """The bounded sibling of the sync cluster ``client``."""
    node = client.get_default_node()
    pool = node_client(node).connection_pool
    settings = connection_settings(
        _carried(pool.connection_kwargs), pool.connection_class, source=describe(client)
    )
    return sync_cluster(library, _nodes(client), pool, pool.connection_class, settings)


def sync_cluster(
    library: ClientLibrary,
    nodes: list[tuple[str, int]],
    template: Any,
    connection_class: type,
    settings: dict[str, Any],
) -> Any:
    """A sync cluster client of ``nodes`` whose node pools are like ``template`` (a pool,
    or an asyncio cluster client's settings) and wait when full, with the bounded retry."""
    size, wait, bounded = pool_bounds(library, template, settings)
    host, port = nodes[0]
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    # (node pools that never hand out a connection an interrupted call left with a reply
    # unread: see .interruptions)
    extra: dict[str, Any] = {"connection_pool_class": guarded_pool(library.sync_pool)}
    if bounded:
        extra = {
            "connection_pool_class": guarded_pool(library.sync_blocking_pool),
            "timeout": wait,
        }
    # (only a client made from a URL builds its node pools with connection_pool_class)
    client = library.sync_cluster(
        url=f"redis://{netloc}",
        startup_nodes=[library.sync_cluster_node(h, p) for h, p in nodes[1:]],
        connection_class=connection_class,
        max_connections=size,
        **_retry(library, asyncio=False),
        **extra,
        **settings,
    )
    _close_pools_too(client)
    return client


def _close_pools_too(client: Any) -> None:
    """Make closing ``client`` close its node pools' connections: a cluster client made from
    a URL gives each node's client a pool that client does not own, and closing them leaves
    the connections open."""
    close = client.close

    def close_all() -> None:
        close()
        for node in client.get_nodes():
            direct = node_client(node)
            if direct is not None:
                direct.connection_pool.disconnect()

    client.close = close_all


def async_cluster(library: ClientLibrary, client: Any) -> Any:
    """An asyncio twin of the sync cluster ``client``: bounded retry, and callers wait for a
    free connection when as many commands as a node pool holds are in flight."""
    node = client.get_default_node()
    pool = node_client(node).connection_pool
    settings = _carried(pool.connection_kwargs)
    if issubclass(pool.connection_class, library.connections["SSLConnection"][0]):
        settings["ssl"] = True  # (an asyncio cluster client picks its connection class)
    settings = connection_settings(
        settings, library.async_cluster, source=describe(client), across=True
    )
    size, _, bounded = pool_bounds(library, pool, settings)
    host, port = _nodes(client)[0]
    twin = library.async_cluster(
        host=host,
        port=port,
        max_connections=size,
        **_retry(library, asyncio=True),
        **settings,
    )
    _bound_commands(twin, size if bounded else None)
    return twin


def sync_twin(library: ClientLibrary, client: Any) -> Any:
    """A bounded sync twin of the asyncio cluster ``client``."""
    connection_class = client.connection_kwargs["connection_class"]
    twin_class = library.twin_connection_class(connection_class, to_async=False)
    if twin_class is None:
        raise LockConfigurationError(
            f"cannot derive a sync client from a cluster of {connection_class.__name__}; "
            "pass both clients explicitly"
        )
    settings = connection_settings(
        _carried(client.connection_kwargs), twin_class, source=describe(client), across=True
    )
    template = _Template(int(client.connection_kwargs.get("max_connections") or 2**31))
    return sync_cluster(library, _nodes(client), template, twin_class, settings)


class _Template:
    """A pool's size, for an asyncio cluster client (its nodes have no pool object)."""

    def __init__(self, max_connections: int) -> None:
        self.max_connections = max_connections


def _bound_commands(client: Any, size: int | None) -> None:
    """Make ``client``'s commands wait for one of ``size`` places (an asyncio cluster node
    holds at most ``size`` connections and refuses a command beyond them; None: no limit),
    and refresh the slot map at once after a command failed on an unreachable node, asking
    that node last.

    redis-py 8's asyncio cluster client leaves that refresh to the next command, which
    asks the nodes in random order: the unreachable node first, a third of the time on three
    masters, for one socket timeout more than the two a call may take. And it learns the
    slot map at its first command: commands that come in meanwhile (many callers starting
    at once) are sent to the wrong node and redirected, their redirections refresh the slot
    map again, and each refresh drops the connections in use, failing other callers'
    commands ("Connection closed by server"). Every command here waits for the slot map.
    """
    gate = asyncio.Semaphore(size) if size is not None else contextlib.nullcontext()
    run = client.execute_command
    defers = "last_failed_node_name" in inspect.signature(client.initialize).parameters

    async def execute_command(*args: Any, **kwargs: Any) -> Any:
        async with gate:
            await client.initialize()  # (returns at once once the slot map is known)
            try:
                return await run(*args, **kwargs)
            except Exception as error:
                failed = getattr(error, "last_failed_node_name", None)
                if defers and failed is not None:
                    with contextlib.suppress(Exception):  # the command's error is the news
                        await client.initialize(last_failed_node_name=failed)
                raise

    client.execute_command = execute_command

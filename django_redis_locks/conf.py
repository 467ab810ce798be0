"""The ``DJANGO_REDIS_LOCKS`` settings dict: defaults, validation and a cache reset on change.

Read lazily through :func:`get_config`; ``override_settings`` works because the cached value
is dropped whenever ``DJANGO_REDIS_LOCKS`` or ``CACHES`` change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from .core.connection.backend import (
    DEFAULT_NAMESPACE,
    DEFAULT_REPLICA_WAIT_TIMEOUT,
    DEFAULT_TIMEOUT,
)
from .core.errors import LockError
from .core.validation import check_namespace, check_ttl

__all__ = ["SETTING_NAME", "Config", "get_config", "reset"]

SETTING_NAME = "DJANGO_REDIS_LOCKS"

_T = TypeVar("_T")

OnRedisError = Literal["fail_closed", "fail_open"]
OnLost = Literal["raise", "return"]

DEFAULTS: dict[str, Any] = {
    # Cache alias whose Redis connection the locks use (django-redis or Django's RedisCache).
    "CACHE_ALIAS": "default",
    # Prefix of every key; keep it apart from ordinary cache keys.
    "NAMESPACE": DEFAULT_NAMESPACE,
    # TTL in seconds of locks created without timeout=.
    "DEFAULT_TIMEOUT": DEFAULT_TIMEOUT,
    # What the decorator does when Redis fails: "fail_closed" (raise / 503) or "fail_open"
    # (run the wrapped code without the lock, and log it).
    "ON_REDIS_ERROR": "fail_closed",
    # Dotted path to a ClientFactory subclass (or any callable alias -> client), for Redis
    # Cluster or custom clients; None: take the client from CACHE_ALIAS.
    "CLIENT_FACTORY": None,
    # Seconds an acquire with wait_for_replicas waits for replica acknowledgements.
    "REPLICA_WAIT_TIMEOUT": DEFAULT_REPLICA_WAIT_TIMEOUT,
    # HTTP status a decorated view answers when its lock is taken (with Retry-After).
    "VIEW_CONTENTION_STATUS": 409,
    # HTTP status a decorated view answers when Redis fails and the policy is fail_closed.
    "VIEW_REDIS_ERROR_STATUS": 503,
    # What a decorated view does when its hold was lost while it ran (expired unrenewed, or
    # force-released): "return" its response (the work is done; the loss is logged at ERROR)
    # or "raise" LockLost (Django answers 500). Functions and tasks raise unless on_lost=.
    "VIEW_ON_LOCK_LOST": "return",
    # Most seconds a contended decorated call asks to wait (Retry-After, a retry's countdown)
    # from the lock's estimate; the decorator's retry_after= sets a fixed wait instead.
    "RETRY_AFTER_MAX": 60,
}


@dataclass(frozen=True)
class Config:
    """Validated settings."""

    cache_alias: str
    namespace: str
    default_timeout: float
    on_redis_error: OnRedisError
    client_factory: str | None
    replica_wait_timeout: float
    view_contention_status: int = 409
    view_redis_error_status: int = 503
    retry_after_max: int = 60
    view_on_lock_lost: OnLost = "return"


def _invalid(key: str, message: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{SETTING_NAME}[{key!r}] {message}")


def _checked(key: str, check: Callable[[Any], _T], value: Any) -> _T:
    try:
        return check(value)
    except LockError as exc:
        # The core's message starts with its own argument name ("namespace: ..."): name the key.
        raise _invalid(key, str(exc).partition(": ")[2]) from exc


def _build(user: Any) -> Config:
    if not isinstance(user, dict):
        raise ImproperlyConfigured(f"{SETTING_NAME} must be a dict, not {type(user).__name__}")
    unknown = sorted(set(user) - set(DEFAULTS))
    if unknown:
        raise ImproperlyConfigured(
            f"{SETTING_NAME} has unknown keys {unknown}; known keys: {sorted(DEFAULTS)}"
        )
    values = {**DEFAULTS, **user}
    alias = values["CACHE_ALIAS"]
    if not isinstance(alias, str) or not alias:
        raise _invalid("CACHE_ALIAS", f"must be a non-empty str, not {alias!r}")
    policy = values["ON_REDIS_ERROR"]
    if policy not in ("fail_closed", "fail_open"):
        raise _invalid("ON_REDIS_ERROR", f"must be 'fail_closed' or 'fail_open', not {policy!r}")
    factory = values["CLIENT_FACTORY"]
    if factory is not None and (not isinstance(factory, str) or not factory):
        raise _invalid("CLIENT_FACTORY", f"must be a dotted path or None, not {factory!r}")
    namespace = _checked("NAMESPACE", check_namespace, values["NAMESPACE"])
    default_timeout = _checked("DEFAULT_TIMEOUT", check_ttl, values["DEFAULT_TIMEOUT"])
    replica_wait = _checked("REPLICA_WAIT_TIMEOUT", check_ttl, values["REPLICA_WAIT_TIMEOUT"])
    statuses = {}
    for key in ("VIEW_CONTENTION_STATUS", "VIEW_REDIS_ERROR_STATUS"):
        status = values[key]
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            raise _invalid(key, f"must be an HTTP error status from 400 to 599, not {status!r}")
        statuses[key] = status
    retry_after_max = values["RETRY_AFTER_MAX"]
    if (
        isinstance(retry_after_max, bool)
        or not isinstance(retry_after_max, int)
        or not 1 <= retry_after_max <= 86_400
    ):
        raise _invalid(
            "RETRY_AFTER_MAX", f"must be whole seconds from 1 to 86400, not {retry_after_max!r}"
        )
    view_on_lost = values["VIEW_ON_LOCK_LOST"]
    if view_on_lost not in ("raise", "return"):
        raise _invalid("VIEW_ON_LOCK_LOST", f"must be 'return' or 'raise', not {view_on_lost!r}")
    return Config(
        view_on_lock_lost=view_on_lost,
        retry_after_max=retry_after_max,
        view_contention_status=statuses["VIEW_CONTENTION_STATUS"],
        view_redis_error_status=statuses["VIEW_REDIS_ERROR_STATUS"],
        cache_alias=alias,
        namespace=namespace,
        default_timeout=default_timeout,
        on_redis_error=policy,
        client_factory=factory,
        replica_wait_timeout=replica_wait,
    )


_ABSENT = object()
# (the setting's value, its Config): the value is compared by identity on every read, so a
# change that sends no setting_changed signal (deleting the setting in a test, e.g. with
# pytest-django's ``del settings.DJANGO_REDIS_LOCKS``, or restoring it) is noticed too.
_cached: tuple[object, Config] | None = None


def get_config() -> Config:
    """The validated settings. Raises ImproperlyConfigured when they are wrong."""
    global _cached
    user = getattr(settings, SETTING_NAME, _ABSENT)
    cached = _cached
    if cached is not None and cached[0] is user:
        return cached[1]
    config = _build({} if user is _ABSENT else user)
    if cached is not None:
        _changed()  # what was built from the previous value goes
    _cached = (user, config)
    return config


#: Called, with no arguments, when the settings change: :mod:`.connection` adds the dropping
#: of the Backends it built from them (this module never imports it).
on_change: list[Callable[[], None]] = []


def _changed() -> None:
    for listener in on_change:
        listener()


def reset() -> None:
    """Forget the cached settings (and, through ``on_change``, the connections built from
    them)."""
    global _cached
    _cached = None
    _changed()

"""Distributed locks and fair counting semaphores on Redis, for Django.

Importing this package never imports Django: the core (``django_redis_locks.core``) works
with any redis-py client, and the Django layer is loaded when a lock is given no client, or
when one of its names (``redis_lock``, ``SemaphoreCommandMixin``) is first used.
"""

import sys
from typing import TYPE_CHECKING, Any

from . import inspection as _inspection
from .core import (
    AlreadyQueued,
    Backend,
    HolderInfo,
    InvalidArgument,
    InvalidArgumentType,
    Lock,
    LockAlreadyHeld,
    LockBackendError,
    LockConfigurationError,
    LockError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    LockNotReplicated,
    Page,
    Semaphore,
    SemaphoreFull,
    SemaphoreInfo,
    SemaphoreLimitMismatch,
    ahand_off,
    atake_over,
    hand_off,
    take_over,
)
from .core.connection.backend import set_default_resolver

if TYPE_CHECKING:  # for type checkers only: at run time these load on first use
    from .commands import SemaphoreCommandMixin
    from .decorators import SKIPPED, redis_lock
    from .unique import unique_task

__version__ = "0.1.0.dev0"

# Names of the Django layer, imported on first use (PEP 562) so the core stays Django-free.
_DJANGO_NAMES = {
    "SKIPPED": "django_redis_locks.decorators",
    "redis_lock": "django_redis_locks.decorators",
    "SemaphoreCommandMixin": "django_redis_locks.commands",
    "unique_task": "django_redis_locks.unique",
}

__all__ = [
    "SKIPPED",
    "AlreadyQueued",
    "Backend",
    "HolderInfo",
    "InvalidArgument",
    "InvalidArgumentType",
    "Lock",
    "LockAlreadyHeld",
    "LockBackendError",
    "LockConfigurationError",
    "LockError",
    "LockLost",
    "LockNotAcquired",
    "LockNotOwned",
    "LockNotReplicated",
    "Page",
    "Semaphore",
    "SemaphoreCommandMixin",
    "SemaphoreFull",
    "SemaphoreInfo",
    "SemaphoreLimitMismatch",
    "ahand_off",
    "atake_over",
    "hand_off",
    "redis_lock",
    "take_over",
    "unique_task",
]


def _django_backend(using: str | None) -> Backend:
    """Resolve ``using=`` through the Django layer, imported on the first lock without a
    client (the core never imports it)."""
    try:
        from .connection import get_backend
    except ImportError as exc:
        raise LockConfigurationError(
            "no Redis client: pass client=<redis client>, or use the Django app "
            f"(importing its connection layer failed: {exc})"
        ) from exc
    return get_backend(using)


set_default_resolver(_django_backend)

# The old import path ``django_redis_locks.inspect``, kept working without a module of that
# name (which would shadow the standard library's ``inspect`` wherever this directory is on
# ``sys.path``); ``inspect.pyi`` tells type checkers.
sys.modules.setdefault(f"{__name__}.inspect", _inspection)


def __getattr__(name: str) -> Any:
    if name == "inspect":
        return _inspection
    module = _DJANGO_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)

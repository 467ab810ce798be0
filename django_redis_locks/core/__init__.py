"""The Django-free core: Lua scripts, keys, Lock, Semaphore, registry, renewer and wake-ups.

Never imports Django.
"""

from .backend import Backend
from .errors import (
    InvalidArgument,
    InvalidArgumentType,
    LockAlreadyHeld,
    LockBackendError,
    LockConfigurationError,
    LockError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    LockNotReplicated,
    SemaphoreFull,
    SemaphoreLimitMismatch,
)
from .info import HolderInfo, Page, SemaphoreInfo
from .lock import Lock
from .semaphore import Semaphore

__all__ = [
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
    "SemaphoreFull",
    "SemaphoreInfo",
    "SemaphoreLimitMismatch",
]

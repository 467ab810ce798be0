"""The Django-free core: Lua scripts, keys, Lock, renewer and wake-ups. Never imports Django."""

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
)
from .lock import Lock

__all__ = [
    "Backend",
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
]

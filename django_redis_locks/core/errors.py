"""The one error hierarchy of django-redis-locks: everything raised derives from LockError."""

from __future__ import annotations

__all__ = [
    "AlreadyQueued",
    "InvalidArgument",
    "InvalidArgumentType",
    "LockAlreadyHeld",
    "LockBackendError",
    "LockConfigurationError",
    "LockError",
    "LockLost",
    "LockNotAcquired",
    "LockNotOwned",
    "LockNotReplicated",
    "SemaphoreFull",
    "SemaphoreLimitMismatch",
]


class LockError(Exception):
    """Base class of every error this library raises."""


class InvalidArgument(LockError, ValueError):
    """An argument has the right type but a value that is not allowed.

    ``argument`` names the offending parameter (``"name"``, ``"timeout"``, ...).
    """

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"{argument}: {message}")
        self.argument = argument


class InvalidArgumentType(LockError, TypeError):
    """An argument has the wrong type (a bool or a str where seconds are expected, ...)."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"{argument}: {message}")
        self.argument = argument


class LockConfigurationError(LockError):
    """The library is not configured well enough to reach Redis (no client, bad alias, ...)."""


class LockBackendError(LockError):
    """Redis could not be reached, did not answer in time, or refused a command.

    The original redis-py exception is chained as ``__cause__``.
    """


class LockNotAcquired(LockError):
    """The lock (or semaphore slot) could not be had: it is held elsewhere and waiting ended.

    ``retry_after`` is how many seconds until the name is likely free, when known: estimated
    from how long recent holds of the name lasted, never more than the holder's remaining
    time to live (which it is when nothing is known yet).
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class AlreadyQueued(LockNotAcquired):
    """A unique task with these arguments is queued or running already: nothing was enqueued.

    ``task_id`` is that task's id when known (None in the moment between another enqueue's
    taking the name and its task's being stored).
    """

    def __init__(
        self, message: str, *, task_id: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, retry_after=retry_after)
        self.task_id = task_id


class LockNotReplicated(LockNotAcquired):
    """The acquire reached the primary but too few replicas acknowledged it; it was undone."""


class SemaphoreFull(LockNotAcquired):
    """No semaphore slot could be had: all are taken and waiting ended."""


class SemaphoreLimitMismatch(LockError):
    """The semaphore is in use with another limit; nothing was changed.

    Everyone using one name must pass the same limit. ``stored_limit`` is the limit in
    force, ``limit`` the one asked for.
    """

    def __init__(self, message: str, *, stored_limit: int, limit: int) -> None:
        super().__init__(message)
        self.stored_limit = stored_limit
        self.limit = limit


class LockNotOwned(LockError):
    """Release or extend by a caller that does not hold the lock; Redis was left untouched."""


class LockLost(LockNotOwned):
    """The caller held the lock but no longer does: it expired, was taken over or force-released."""


class LockAlreadyHeld(LockError, RuntimeError):
    """The calling thread or task already holds this lock (locks are not re-entrant)."""

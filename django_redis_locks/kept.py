"""A hold kept past the code that took it, released once, from whichever thread or task comes
first: a decorated call's hold kept for its streamed response or its coroutine
(:mod:`.decorators.kept_holds`), or for the end of its transaction (:mod:`.transactions`).

The release may come from another thread or task than the one that took the lock, so it is
made for the hold itself, not for the current owner. Renewal goes on while the owner that
took the lock (the thread, or the asyncio task) lives, as for any hold.
"""

from __future__ import annotations

import logging
import threading

from django_redis_locks.conf import get_config
from django_redis_locks.core.errors import LockBackendError, LockLost
from django_redis_locks.core.lock import Lock
from django_redis_locks.core.runtime.driver import adrive, drive
from django_redis_locks.core.runtime.holds import Hold

__all__ = ["HeldAs", "KeptHold", "held_as"]

logger = logging.getLogger("django_redis_locks.decorators")

#: A hold as nesting and transactions know it: (cache alias, lock name).
HeldAs = tuple[str, str]


def held_as(using: str | None, name: str) -> HeldAs:
    """``name`` on the alias ``using`` (None: the ``CACHE_ALIAS`` setting's, as for the lock)."""
    return (using or get_config().cache_alias, name)


class KeptHold:
    """One call's hold, released once (from any thread or task) when its result is done."""

    def __init__(self, lock: Lock, hold: Hold, label: str, held_as: HeldAs) -> None:
        self.lock = lock  # kept alive with the hold: a collected Lock is no longer renewed
        self.hold = hold
        self.label = label
        self.held_as = held_as  # what each step of the later work runs continuing
        self._mutex = threading.Lock()
        self._released = False

    def _claim(self) -> bool:
        with self._mutex:
            if self._released:
                return False
            self._released = True
            return True

    def release(self, error: BaseException | None = None, *, at_end: bool = False) -> None:
        """Release the hold, if no one did yet. ``error``: what ended the work (the release
        failing is noted on it). ``at_end``: the work finished normally, so a hold lost
        meanwhile raises LockLost, as a decorated call does; otherwise it is logged."""
        if not self._claim():
            return
        try:
            drive(self.lock._release(self.hold), self.hold.backend)
        except (LockLost, LockBackendError) as failure:
            self._failed(failure, error, at_end)

    async def arelease(self, error: BaseException | None = None, *, at_end: bool = False) -> None:
        """:meth:`release` from asyncio code."""
        if not self._claim():
            return
        try:
            await adrive(self.lock._release(self.hold), self.hold.backend)
        except (LockLost, LockBackendError) as failure:
            self._failed(failure, error, at_end)

    def close(self) -> None:
        """A response closer: release, logging a failure (close() must not raise)."""
        self.release()

    def _failed(
        self, failure: LockLost | LockBackendError, error: BaseException | None, at_end: bool
    ) -> None:
        if at_end and error is None and isinstance(failure, LockLost):
            raise failure
        # A failed release is sent again in the background; a lost hold is past helping.
        logger.warning("release: lock %r after %s failed: %s", self.lock.name, self.label, failure)
        if error is not None:
            error.add_note(
                f"django-redis-locks: releasing {self.lock.name!r} also failed: {failure}"
            )

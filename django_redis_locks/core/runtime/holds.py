"""A hold (one owner's grant of a lock or semaphore slot, as this process knows it) and its
lifecycle.

States, and who moves a hold between them::

    HELD ──begin_release()──▶ RELEASING ──released()──▶ RELEASED
     │                          │
     │                          └──lose(reason)──▶ LOST     the release found it gone
     ├──lose(reason)──▶ LOST                      the owner's own call found it gone
     ├──lose(reason, generation=g)──▶ LOST        the renewer found it gone (only if the
     │                                            hold is still HELD in generation g)
     └──end()──▶ ENDED                            expired unrenewed, abandoned, forked away

The *generation* counts what the owner did to the hold: it grows with every ``extend()`` and
when a release begins. The renewer notes it when it sends a renewal and applies the reply only
if it is unchanged, so a renewal in flight while the owner releases (or extends) can neither
report a loss after a clean release nor overwrite a newer expiry. Every transition happens
under the hold's own mutex; the methods return whether it took place.

A loss is reported once (``report_lost``): by the owner's thread when its own call found it,
else on the callback thread (see :mod:`.callbacks`), never on a renewal path.
"""

from __future__ import annotations

import enum
import functools
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django_redis_locks.core.protocol.holder import holder_id

__all__ = ["Hold", "HoldTable", "State"]


class State(enum.Enum):
    HELD = "held"
    RELEASING = "releasing"
    RELEASED = "released"
    LOST = "lost"
    ENDED = "ended"


@dataclass(eq=False)
class Hold:
    """One owner's hold on one lock or semaphore slot.

    ``expires_at`` is a conservative local estimate (``time.monotonic()``): the clock was read
    before the request that set the TTL was sent, so Redis expires the hold no earlier.
    """

    token: str = field(repr=False)  # (never in a log line, however the hold is printed)
    fence: int
    ttl: float
    expires_at: float
    owner: weakref.ref[Any]
    backend: Any  # the Backend the hold was taken on: release and extend go there
    keys: Any  # the primitive's keys on that backend
    pid: int = field(default_factory=os.getpid)
    #: When the owner learned of the grant (``time.monotonic()``): what ``held`` counts from.
    granted_at: float = field(default_factory=time.monotonic)
    state: State = State.HELD
    lost_reason: str | None = None
    on_lost: Callable[[str], None] | None = None  # tells the primitive (logs, events, on_lost)
    #: Tells the primitive that a renewal got no reply (an event; on the callback thread).
    on_renew_failed: Callable[[str], None] | None = None
    renewed: bool = False  # handed to the renewer
    lane: Any = None  # the renewer's lane that renews it now (None: none)
    release_sent: bool = False  # a release was sent: its reply may have been lost
    release_told: bool = False  # the released event was sent (for a release without reply)
    extends: int = 0  # extend() calls so far: their sequence number, so a resend counts once
    #: Until when (monotonic) a late copy of its acquire may still land (its acquire went out
    #: more than once; see .deadlines): when the hold ends, the token is watched until then.
    copies_until: float = 0.0
    generation: int = 0
    _mutex: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _lost_event: threading.Event | None = field(default=None, repr=False)
    _reported: bool = field(default=False, repr=False)

    @functools.cached_property
    def holder_id(self) -> str:
        return holder_id(self.token)

    @property
    def lost(self) -> bool:
        return self.state is State.LOST

    @property
    def active(self) -> bool:
        """HELD or RELEASING: the owner may still release it."""
        return self.state is State.HELD or self.state is State.RELEASING

    def local_time_left(self) -> float:
        return self.expires_at - time.monotonic()

    # -- transitions ---------------------------------------------------------------------
    def begin_release(self) -> bool:
        """HELD (or RELEASING, for a retried release) -> RELEASING; False if not active."""
        with self._mutex:
            if not self.active:
                return False
            self.state = State.RELEASING
            self.generation += 1
            return True

    def released(self) -> None:
        with self._mutex:
            if self.state is State.RELEASING:
                self.state = State.RELEASED

    def extended(self, expires_at: float) -> None:
        """The owner extended the hold: a new expiry, and a new generation."""
        with self._mutex:
            self.generation += 1
            self.expires_at = expires_at

    def renewed_until(self, expires_at: float, generation: int) -> bool:
        """A renewal sent in ``generation`` succeeded: apply it if nothing changed since."""
        with self._mutex:
            if self.state is not State.HELD or self.generation != generation:
                return False
            self.expires_at = expires_at
            return True

    def lose(self, reason: str, generation: int | None = None) -> bool:
        """Mark the hold lost. With ``generation`` (the renewer): only if it is still HELD in
        that generation. Without (the owner's own call): if it is HELD or RELEASING."""
        with self._mutex:
            if generation is not None:
                if self.state is not State.HELD or self.generation != generation:
                    return False
            elif not self.active:
                return False
            self.state = State.LOST
            self.lost_reason = reason
            return True

    def end(self) -> None:
        """The owner holds nothing any more, without a loss to report."""
        with self._mutex:
            if self.state is State.HELD or self.state is State.RELEASING:
                self.state = State.ENDED

    # -- loss reporting ------------------------------------------------------------------
    def report_lost(self) -> None:
        """Tell the primitive (once, after ``lose``); then set :attr:`lost_event`."""
        try:
            if self.on_lost is not None and self.lost_reason is not None:
                self.on_lost(self.lost_reason)
        finally:
            with self._mutex:
                self._reported = True
                event = self._lost_event
            if event is not None:  # after the callback: whoever waits sees its effects
                event.set()

    @property
    def lost_event(self) -> threading.Event:
        """Set once a loss of this hold has been reported (made on first use)."""
        with self._mutex:
            if self._lost_event is None:
                self._lost_event = threading.Event()
                if self._reported:
                    self._lost_event.set()
            return self._lost_event


class HoldTable:
    """The holds of one Lock or Semaphore object, one per owner (a thread, greenlet or asyncio
    task; see :mod:`.ownership`). An owner that is gone drops out by itself (weak keys); a
    hold made before a fork is not the child's."""

    __slots__ = ("_by_owner",)

    def __init__(self) -> None:
        self._by_owner: weakref.WeakKeyDictionary[Any, Hold] = weakref.WeakKeyDictionary()

    def get(self, owner: Any) -> Hold | None:
        """``owner``'s hold in this process, or None."""
        hold = self._by_owner.get(owner)
        if hold is not None and hold.pid != os.getpid():
            return None  # the parent's hold, seen from a forked child
        return hold

    def holds(self) -> list[Hold]:
        """Every owner's hold, as the table has them now."""
        return list(self._by_owner.values())

    def put(self, owner: Any, hold: Hold) -> None:
        self._by_owner[owner] = hold

    def drop(self, hold: Hold) -> None:
        """Forget ``hold`` if it is still its owner's current one."""
        owner = hold.owner()
        if owner is not None and self._by_owner.get(owner) is hold:
            del self._by_owner[owner]

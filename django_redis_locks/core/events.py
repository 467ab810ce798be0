"""What happens to holds, for whoever listens: the Django layer turns events into signals.

Listeners are called synchronously, in the thread where the event happened (for a loss that
the renewer finds, the library's callback thread, see :mod:`.runtime.callbacks`, never the
renewer's); one that raises is logged and does not disturb the others or the operation.
Events never carry tokens, only holder ids.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .runtime.exiting import quiet_at_exit

__all__ = ["Event", "EventType", "emit", "listening", "subscribe", "subscribed", "unsubscribe"]

logger = quiet_at_exit(logging.getLogger(__name__))

EventType = Literal[
    "acquired",
    "released",
    "contended",
    "timed_out",
    "cancelled",
    "failed",
    "lost",
    "expired",
    "renew_failed",
    "force_released",
]


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened to a lock or semaphore hold.

    - ``acquired``: a hold was granted; ``waited``: seconds from the start of the acquire
      call (``acquire()``, ``with``, a decorated call's lock) to the grant; ``handed_over``:
      True when the name was already granted to the call's token when its attempt arrived:
      handed to it by a release while it waited (or granted by an earlier copy of the attempt
      whose reply was lost).
    - ``released``: its holder released it; ``held``: seconds from the grant. ``reason`` is
      set when the release got no reply (LockBackendError, a cancelled ``arelease()``): the
      release goes on in the background (or the hold runs out), the owner has given it back.
    - ``contended``: an acquire that does not wait (``blocking=False``) found the name taken;
      ``timed_out``: a blocking acquire's wait ran out. Both with ``waited`` (the whole call)
      and ``retry_after`` (the estimated wait, see LockNotAcquired); ``holder_id`` is None.
    - ``cancelled``: an acquire call ended by a cancellation or an interruption (asyncio
      cancellation, ``asyncio.timeout``, KeyboardInterrupt) while it asked or waited;
      ``failed``: one that ended with an error once it asked: LockBackendError (Redis out of
      reach, no reply), LockNotReplicated, SemaphoreLimitMismatch. Both with ``waited``;
      ``holder_id`` is None (whatever it may have been granted is undone). A call refused
      before it asks (LockAlreadyHeld, a bad argument) sends no event.
    - ``lost``: a holder found its hold gone; ``reason`` says why, ``held`` how long after the
      grant it was found.
    - ``expired``: a hold kept without ``auto_renew`` ran out before its owner released it,
      found by the owner's next acquire of the name (no warning, no ``on_lost``: a hold may be
      left to run out on purpose); ``held``: from the grant to its expiry.
    - ``renew_failed``: a renewal of an ``auto_renew`` hold got no reply (``reason``); it is
      retried until the hold's TTL runs out, then the hold is ``lost``. Sent on the callback
      thread.
    - ``force_released``: an operator evicted a hold; ``by`` names who (sent by the process
      that forced it, which knows neither ``held`` nor ``metric_name``).

    ``fence`` is the lock's fencing number or the semaphore holder's ticket; ``label`` the
    caller label of the metadata; ``metric_name`` the bounded name to aggregate by (the
    primitive's ``metric_name``: given by the user, or a decorated call's key template; None:
    not set). Times are from the process's monotonic clock.
    """

    event: EventType
    kind: Literal["lock", "semaphore"]
    name: str
    holder_id: str | None = None
    fence: int | None = None
    label: str | None = None
    reason: str | None = None
    retry_after: float | None = None
    by: str | None = None
    waited: float | None = None
    held: float | None = None
    metric_name: str | None = None
    handed_over: bool | None = None


Listener = Callable[[Event], None]
Wants = Callable[[EventType], bool]
_listeners: tuple[tuple[Listener, Wants | None], ...] = ()
_mutex = threading.Lock()


def subscribe(listener: Listener, wants: Wants | None = None) -> None:
    """Call ``listener(event)`` for every event from now on (once, however often added).

    ``wants(event_type)``, when given, says whether the listener cares about that type of
    event right now (for instance whether a signal has receivers); events that no listener
    wants are not even built.
    """
    global _listeners
    with _mutex:
        if all(known != listener for known, _ in _listeners):
            _listeners = (*_listeners, (listener, wants))


def unsubscribe(listener: Listener) -> None:
    global _listeners
    with _mutex:
        _listeners = tuple(entry for entry in _listeners if entry[0] != listener)


def subscribed() -> bool:
    """Whether any listener is subscribed at all (no user code runs to answer)."""
    return bool(_listeners)


def listening(event_type: EventType) -> bool:
    """Whether anyone wants events of ``event_type``: callers skip building unwanted ones."""
    if not _listeners:
        return False
    return any(_wants(listener, wants, event_type) for listener, wants in _listeners)


def _wants(listener: Listener, wants: Wants | None, event_type: EventType) -> bool:
    """``wants(event_type)``; one that raises is logged and taken for a yes (the listener's
    own errors are then logged too), so it disturbs no operation."""
    if wants is None:
        return True
    try:
        return bool(wants(event_type))
    except Exception:
        logger.exception("event filter of %r failed on %s", listener, event_type)
        return True


def emit(event: Event) -> None:
    for listener, wants in _listeners:
        if not _wants(listener, wants, event.event):
            continue
        try:
            listener(event)
        except Exception:
            logger.exception("event listener %r failed on %s", listener, event.event)

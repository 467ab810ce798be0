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

__all__ = ["Event", "EventType", "emit", "listening", "subscribe", "unsubscribe"]

logger = quiet_at_exit(logging.getLogger(__name__))

EventType = Literal["acquired", "released", "contended", "lost", "force_released"]


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened to a lock or semaphore hold.

    ``holder_id`` is None for ``contended`` (the caller got no hold); ``fence`` is the lock's
    fencing number or the semaphore holder's ticket; ``reason`` says why a hold was lost;
    ``retry_after`` is the estimated wait on contention (see LockNotAcquired); ``by`` names
    who forced a release.
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


def listening(event_type: EventType) -> bool:
    """Whether anyone wants events of ``event_type``: callers skip building unwanted ones."""
    if not _listeners:
        return False
    return any(wants is None or wants(event_type) for _, wants in _listeners)


def emit(event: Event) -> None:
    for listener, wants in _listeners:
        if wants is not None and not wants(event.event):
            continue
        try:
            listener(event)
        except Exception:
            logger.exception("event listener %r failed on %s", listener, event.event)

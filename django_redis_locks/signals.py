"""Django signals sent for what happens to lock and semaphore holds.

Each is sent with ``sender`` = the primitive's class (:class:`Lock` or :class:`Semaphore`) and
keyword arguments ``kind`` ("lock" or "semaphore"), ``name``, ``holder_id``, ``fence`` (the
lock's fencing number, or the semaphore holder's ticket), ``label`` (the caller label from the
metadata), ``reason``, ``retry_after`` and ``by``, each None where it does not apply:

- ``hold_acquired``: a hold was granted.
- ``hold_released``: its holder released it.
- ``hold_contended``: an acquire gave up because the name was taken (``retry_after``: the
  holder's remaining TTL in seconds); ``holder_id`` is None.
- ``hold_lost``: a holder found its hold gone (``reason``); sent from the library's callback
  thread when the renewer finds it (never from a renewal path, so a slow receiver delays no
  renewal), else from the holder's own thread.
- ``hold_force_released``: an operator evicted a hold (``by`` names who).

Receivers run synchronously in the thread where it happened (the callback thread for losses
found in the background); an exception in one is logged and does not disturb the lock
operation. The callback thread closes its database connections whenever it has nothing more
to do, so a receiver that uses the ORM leaves no connection open.
"""

from __future__ import annotations

from django.db import connections
from django.dispatch import Signal

from .core.events import Event, EventType, subscribe
from .core.lock import Lock
from .core.runtime.callbacks import add_idle_hook
from .core.semaphore import Semaphore

__all__ = [
    "hold_acquired",
    "hold_contended",
    "hold_force_released",
    "hold_lost",
    "hold_released",
]

# Cached per sender (Lock, Semaphore): each operation asks whether anyone listens, and the
# answer then costs a dictionary look-up (connecting or disconnecting a receiver clears it).
hold_acquired = Signal(use_caching=True)
hold_released = Signal(use_caching=True)
hold_contended = Signal(use_caching=True)
hold_lost = Signal(use_caching=True)
hold_force_released = Signal(use_caching=True)

_SIGNALS = {
    "acquired": hold_acquired,
    "released": hold_released,
    "contended": hold_contended,
    "lost": hold_lost,
    "force_released": hold_force_released,
}


def _wanted(event_type: EventType) -> bool:
    signal = _SIGNALS[event_type]
    # Receivers may be connected for any sender or for one of the two classes.
    return signal.has_listeners(Lock) or signal.has_listeners(Semaphore)


def _send(event: Event) -> None:
    signal = _SIGNALS[event.event]
    signal.send(
        sender=Lock if event.kind == "lock" else Semaphore,
        kind=event.kind,
        name=event.name,
        holder_id=event.holder_id,
        fence=event.fence,
        label=event.label,
        reason=event.reason,
        retry_after=event.retry_after,
        by=event.by,
    )


def _close_database_connections() -> None:
    """On the callback thread, between callbacks: close what receivers opened there."""
    connections.close_all()


def connect() -> None:
    """Start turning the core's events into these signals (done by the app's ``ready()``)."""
    subscribe(_send, _wanted)
    add_idle_hook(_close_database_connections)

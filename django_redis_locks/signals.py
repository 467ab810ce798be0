"""Django signals sent for what happens to lock and semaphore holds.

Each is sent with ``sender`` = the primitive's class (:class:`Lock` or :class:`Semaphore`) and
the fields of the core's :class:`~django_redis_locks.core.events.Event` as keyword arguments:
``kind`` ("lock" or "semaphore"), ``name``, ``holder_id``, ``fence`` (the lock's fencing number,
or the semaphore holder's ticket), ``label`` (the caller label from the metadata), ``reason``,
``retry_after``, ``by``, ``waited``, ``held``, ``metric_name`` and ``handed_over``, each None
where it does not apply:

- ``hold_acquired``: a hold was granted (``waited``: seconds the acquire call took;
  ``handed_over``: a release handed it over while the call waited).
- ``hold_released``: its holder released it (``held``: seconds since the grant).
- ``hold_contended``: an acquire gave up because the name was taken (``retry_after``: the
  estimated wait in seconds; ``waited``: seconds the call took; ``timed_out``: True when a
  blocking acquire's wait ran out, False when it did not wait); ``holder_id`` is None.
- ``hold_lost``: a holder found its hold gone (``reason``; ``held``: seconds after the grant);
  sent from the library's callback thread when the renewer finds it (never from a renewal
  path, so a slow receiver delays no renewal), else from the holder's own thread.
- ``hold_force_released``: an operator evicted a hold (``by`` names who).

Receivers run synchronously in the thread where it happened (the callback thread for losses
found in the background); an exception in one is logged and does not disturb the lock
operation. The callback thread closes its database connections whenever it has nothing more
to do, so a receiver that uses the ORM leaves no connection open.
"""

from __future__ import annotations

import dataclasses

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
    "timed_out": hold_contended,
    "lost": hold_lost,
    "force_released": hold_force_released,
}
#: The Event's fields, sent as the signals' keyword arguments (``event`` becomes the signal).
_FIELDS = tuple(f.name for f in dataclasses.fields(Event) if f.name != "event")


def _wanted(event_type: EventType) -> bool:
    signal = _SIGNALS.get(event_type)  # (renew_failed has no signal)
    # Receivers may be connected for any sender or for one of the two classes.
    return signal is not None and (signal.has_listeners(Lock) or signal.has_listeners(Semaphore))


def _send(event: Event) -> None:
    signal = _SIGNALS.get(event.event)
    if signal is None:
        return
    arguments = {field: getattr(event, field) for field in _FIELDS}
    if signal is hold_contended:
        arguments["timed_out"] = event.event == "timed_out"
    signal.send(sender=Lock if event.kind == "lock" else Semaphore, **arguments)


def _close_database_connections() -> None:
    """On the callback thread, between callbacks: close what receivers opened there."""
    connections.close_all()


def connect() -> None:
    """Start turning the core's events into these signals (done by the app's ``ready()``)."""
    subscribe(_send, _wanted)
    add_idle_hook(_close_database_connections)

"""A lock's hold handed from one owner to another, across threads, processes and hosts.

::

    lock = Lock("report:7", timeout=600, auto_renew=False)
    lock.acquire(blocking=False)
    ticket = hand_off(lock)          # this owner holds it no longer; it runs on its TTL
    ...                              # the ticket travels (a task's message, a queue)
    worker_lock = Lock("report:7", timeout=60, auto_renew=True)
    if take_over(worker_lock, ticket):   # this owner holds it now, renewed, a new fence
        ...
        worker_lock.release()

The hold is never free in between: Redis keeps it on its TTL until the take-over, which
gives it a new token (``lock_take_over.lua``). A ticket is taken over once: a second owner
with the same ticket (a task delivered twice) is refused, as is any owner once the hold
expired, was released or was force-released. A ticket is a secret like a token: whoever
has it may take the hold.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from .errors import LockBackendError
from .lock import Lock, session_of
from .protocol import lock_calls, replies, tickets
from .protocol.holder import holder_metadata, new_token
from .runtime.acquiring import lifetime
from .runtime.driver import Detach, Eval, Operation, adrive, drive
from .runtime.holds import Hold
from .runtime.ownership import current_owner
from .runtime.renewal import renewer

__all__ = ["ahand_off", "atake_over", "hand_off", "take_over"]


def hand_off(lock: Lock) -> str:
    """Stop holding ``lock`` in this thread (greenlet, task) without releasing it, and return
    the ticket that lets one other owner :func:`take_over` it. From now on nothing here
    renews it: it lasts what is left of its TTL (set it with ``extend(..., replace=True)``
    first if need be). Raises LockNotOwned / LockLost as :meth:`Lock.release` does, and
    LockBackendError, the hold kept, while a late copy of its acquire may still land (the
    acquire went out more than once): hand off after a moment, or release it."""
    return _hand_off(lock, current_owner())


async def ahand_off(lock: Lock) -> str:
    """:func:`hand_off` for the running asyncio task's hold (no I/O: it never waits)."""
    return _hand_off(lock, current_owner())


def take_over(lock: Lock, ticket: str) -> bool:
    """Make the hold that ``ticket`` names this thread's (greenlet's) hold of ``lock``: with
    ``lock.timeout`` as its TTL, renewed if ``lock.auto_renew``, a new fence, and this
    owner's metadata in listings. False if the hold is gone (expired, released, taken over
    already, force-released). Raises LockAlreadyHeld if this owner holds ``lock`` already,
    InvalidArgument for a malformed ticket, LockBackendError when Redis fails (a take-over
    that may have run is undone in the background)."""
    backend = lock.backend
    return drive(_take_over(lock, backend, current_owner(), ticket), backend)


async def atake_over(lock: Lock, ticket: str) -> bool:
    """Asyncio twin of :func:`take_over`, for the running task."""
    backend = lock.backend
    return await adrive(_take_over(lock, backend, current_owner(), ticket), backend)


def _hand_off(lock: Lock, owner: Any) -> str:
    hold = lock._require_hold(owner)
    if hold.lost:
        raise lock._lost(hold, hold.lost_reason or "")
    if hold.copies_until > time.monotonic():
        raise LockBackendError(
            f"lock {lock.name!r}: its acquire went out more than once and a late copy may "
            "still land; hand it off in a moment, or release it"
        )
    if hold.renewed:
        renewer().remove(hold)
    hold.end()
    lock._holds.drop(hold)
    return tickets.ticket(hold.fence, hold.token)


def _take_over(lock: Lock, backend: Any, owner: Any, handed: str) -> Operation[bool]:
    fence, token = tickets.parse_ticket(handed)
    existing = lock._current_hold(owner)
    if existing is not None:
        yield from lock._retire(existing, owner)
    keys = lock._keys_for(backend)
    ttl = lock.timeout if lock.timeout is not None else backend.default_timeout
    mine = new_token()
    call = lock_calls.take_over_call(
        keys,
        token,
        fence,
        new_token=mine,
        ttl_ms=max(1, round(ttl * 1000)),
        metadata=holder_metadata(owner, lock._metadata_json),
        session=session_of(owner),
    )
    undo = lock._release_call(keys, mine)
    label = f"a take-over of lock {lock.name!r}"
    started = time.monotonic()
    try:
        reply = yield Eval(call)
    except LockBackendError:
        renewer().reclaim(backend, undo, lifetime(ttl), f"{label} whose reply never came")
        raise
    except GeneratorExit:
        raise
    except BaseException:  # cancelled or interrupted: undo whatever it did
        yield Detach(undo, lifetime(ttl), f"an interrupted {label}")
        raise
    if int(reply[0]) != 1:
        return False
    granted = replies.decode_acquired(reply)
    hold = Hold(
        token=mine,
        fence=granted.fence,
        ttl=ttl,
        expires_at=started + granted.ttl_ms / 1000,
        owner=weakref.ref(owner),
        backend=backend,
        keys=keys,
    )
    try:
        lock._record(hold, owner, waited=0.0, handed_over=True)
    except BaseException:
        yield Detach(undo, lifetime(ttl), f"an interrupted {label}")
        raise
    return True

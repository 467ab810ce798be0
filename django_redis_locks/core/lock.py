"""The distributed Lock: atomic acquire with a TTL, token-checked release/extend, fencing.

Each operation is written once as a generator of effects (see :mod:`.driver`); the sync
methods run it with :func:`drive`, their ``a``-prefixed twins with :func:`adrive`.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

from . import protocol
from .backend import Backend, backend_for_client, resolve_backend
from .driver import Command, Detach, Eval, EvalWait, Listen, Operation, Wait, adrive, drive
from .errors import (
    InvalidArgument,
    InvalidArgumentType,
    LockAlreadyHeld,
    LockBackendError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    LockNotReplicated,
)
from .holds import Hold, check_metadata, current_owner, holder_metadata, new_token, owner_alive
from .keys import LockKeys
from .renewer import renewer
from .scripting import Call
from .validation import MAX_TTL_SECONDS, check_name, check_ttl, check_wait, to_millis

__all__ = ["Lock"]

logger = logging.getLogger(__name__)

#: Longest a blocked waiter sleeps between attempts when no release wakes it. Releases wake
#: waiters at once; this only bounds the cost of a lost notification.
RECHECK_SECONDS = 1.0
_MAX_TTL_MS = to_millis(MAX_TTL_SECONDS)

Replicas = int | Literal["majority"]
LostCallback = Callable[["Lock", str], None]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an acquire attempt came to: acquired, or not and how long the holder has left."""

    acquired: bool
    retry_after: float | None = None


class Lock:
    """A mutual-exclusion lock on Redis, shared by every process that uses the same name.

    ``timeout`` is the lock's time to live in seconds (int or float; default: the configured
    default); a holder that crashes frees the lock when it runs out. ``blocking`` and
    ``blocking_timeout`` are the defaults of :meth:`acquire` and of ``with``. With
    ``auto_renew`` the process-wide renewer keeps the TTL topped up while the lock is held.
    ``wait_for_replicas`` (an int, or ``"majority"`` of the replicas connected to the primary)
    makes acquire fail, and undo itself, unless that many replicas acknowledged it.
    ``metadata`` (a JSON-serialisable mapping; key ``"label"`` names the caller) is stored
    with the hold for the admin page. ``on_lost(lock, reason)`` is called, from the renewer
    thread, when an auto-renewed hold turns out to be lost.

    One Lock object may be shared by threads and asyncio tasks: each thread or task has its
    own hold and token, and none can release another's. Locks are not re-entrant.

    Raises InvalidArgument / InvalidArgumentType (ValueError / TypeError) for bad arguments.
    """

    def __init__(
        self,
        name: str,
        *,
        timeout: float | None = None,
        using: str | None = None,
        client: Any = None,
        blocking: bool = True,
        blocking_timeout: float | None = None,
        auto_renew: bool = False,
        wait_for_replicas: Replicas | None = None,
        metadata: Mapping[str, Any] | None = None,
        on_lost: LostCallback | None = None,
    ) -> None:
        self.name = check_name(name)
        self.timeout = None if timeout is None else check_ttl(timeout, "timeout")
        if using is not None and not isinstance(using, str):
            raise InvalidArgumentType("using", f"must be a str or None, not {type(using).__name__}")
        if using is not None and client is not None:
            raise InvalidArgument("using", "give either using= or client=, not both")
        self.using = using
        self.blocking = _check_bool(blocking, "blocking")
        self.blocking_timeout = check_wait(blocking_timeout)
        self.auto_renew = _check_bool(auto_renew, "auto_renew")
        self.wait_for_replicas = _check_replicas(wait_for_replicas)
        self.metadata = check_metadata(metadata)
        if on_lost is not None and not callable(on_lost):
            raise InvalidArgumentType("on_lost", "must be callable or None")
        self.on_lost = on_lost
        self._backend: Backend | None = None
        if client is not None:
            self._backend = client if isinstance(client, Backend) else backend_for_client(client)
        self._holds: weakref.WeakKeyDictionary[Any, Hold] = weakref.WeakKeyDictionary()
        self._pending: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._keys: tuple[str, LockKeys] | None = None

    def __repr__(self) -> str:
        return f"<Lock {self.name!r}>"

    # -- public API: sync ------------------------------------------------------------------
    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Take the lock; True if taken, False if it is held elsewhere and waiting ended.

        ``blocking`` (default: the lock's) waits for a release, up to ``timeout`` seconds
        (default: the lock's ``blocking_timeout``; None waits as long as it takes).
        Raises LockAlreadyHeld if this thread/task holds it already, LockNotReplicated (see
        ``wait_for_replicas``), LockBackendError when Redis fails.
        """
        backend = self.backend
        return drive(self._acquire(backend, blocking, timeout), backend).acquired

    def release(self) -> None:
        """Release this thread's/task's hold.

        Raises LockNotOwned if it holds nothing, LockLost if the hold had expired or been
        taken over (Redis is left untouched then), LockBackendError when Redis fails (the
        hold is kept, so the release can be retried).
        """
        hold = self._require_hold()
        drive(self._release(hold), hold.backend)

    def extend(self, seconds: float, *, replace: bool = False) -> float:
        """Add ``seconds`` to the remaining TTL, or with ``replace=True`` set it to ``seconds``.

        Returns the new TTL in seconds. Raises LockNotOwned / LockLost like :meth:`release`.
        """
        hold = self._require_hold()
        return drive(self._extend(hold, seconds, replace), hold.backend)

    def locked(self) -> bool:
        """Whether anyone holds the lock right now."""
        backend = self.backend
        return drive(self._state(backend, None), backend).held

    def owned(self) -> bool:
        """Whether this thread/task holds the lock, as Redis sees it now."""
        hold = self._current_hold()
        if hold is None or hold.lost:
            return False
        return drive(self._state(hold.backend, hold), hold.backend).owned

    def ensure_held(self) -> float:
        """Return the seconds left on this thread's/task's hold; raise LockLost if it is gone.

        Raises LockNotOwned if nothing was acquired, LockBackendError if Redis cannot tell
        (but LockLost if, in addition, the hold's TTL has run out locally).
        """
        hold = self._require_hold()
        return drive(self._ensure(hold), hold.backend)

    @property
    def fence(self) -> int | None:
        """The fencing number of this thread's/task's hold (None when not held).

        Strictly greater than every fence handed out earlier for this name: pass it along
        with writes and let the resource reject smaller ones.
        """
        hold = self._current_hold()
        return None if hold is None else hold.fence

    def __enter__(self) -> Lock:
        backend = self.backend
        outcome = drive(self._acquire(backend, None, None), backend)
        if not outcome.acquired:
            raise self._not_acquired(outcome)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.release()
        except (LockNotOwned, LockBackendError) as error:
            self._release_failed_on_exit(error, exc)

    # -- public API: asyncio ---------------------------------------------------------------
    async def aacquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Asyncio twin of :meth:`acquire`."""
        backend = self.backend
        return (await adrive(self._acquire(backend, blocking, timeout), backend)).acquired

    async def arelease(self) -> None:
        """Asyncio twin of :meth:`release`."""
        hold = self._require_hold()
        await adrive(self._release(hold), hold.backend)

    async def aextend(self, seconds: float, *, replace: bool = False) -> float:
        """Asyncio twin of :meth:`extend`."""
        hold = self._require_hold()
        return await adrive(self._extend(hold, seconds, replace), hold.backend)

    async def alocked(self) -> bool:
        """Asyncio twin of :meth:`locked`."""
        backend = self.backend
        return (await adrive(self._state(backend, None), backend)).held

    async def aowned(self) -> bool:
        """Asyncio twin of :meth:`owned`."""
        hold = self._current_hold()
        if hold is None or hold.lost:
            return False
        return (await adrive(self._state(hold.backend, hold), hold.backend)).owned

    async def aensure_held(self) -> float:
        """Asyncio twin of :meth:`ensure_held`."""
        hold = self._require_hold()
        return await adrive(self._ensure(hold), hold.backend)

    async def __aenter__(self) -> Lock:
        backend = self.backend
        outcome = await adrive(self._acquire(backend, None, None), backend)
        if not outcome.acquired:
            raise self._not_acquired(outcome)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            await self.arelease()
        except (LockNotOwned, LockBackendError) as error:
            self._release_failed_on_exit(error, exc)

    # -- plumbing --------------------------------------------------------------------------
    @property
    def backend(self) -> Backend:
        """The Backend this lock talks to (the ``using`` alias is resolved on each call)."""
        return self._backend if self._backend is not None else resolve_backend(self.using)

    def _lock_keys(self, backend: Backend) -> LockKeys:
        cached = self._keys
        if cached is None or cached[0] != backend.keys.namespace:
            cached = self._keys = (backend.keys.namespace, backend.keys.lock(self.name))
        return cached[1]

    def _current_hold(self) -> Hold | None:
        hold = self._holds.get(current_owner())
        if hold is not None and hold.pid != os.getpid():
            return None  # the parent's hold, seen from a forked child
        return hold

    def _require_hold(self) -> Hold:
        hold = self._current_hold()
        if hold is None:
            raise LockNotOwned(f"lock {self.name!r} is not held by this {_owner_kind()}")
        return hold

    def _not_acquired(self, outcome: Outcome) -> LockNotAcquired:
        detail = ""
        if outcome.retry_after is not None:
            detail = f"; the holder's TTL has {outcome.retry_after:.3f} s left"
        return LockNotAcquired(
            f"lock {self.name!r} is held by someone else{detail}",
            retry_after=outcome.retry_after,
        )

    def _release_failed_on_exit(self, error: LockError_, exc: BaseException | None) -> None:
        hold = self._current_hold()
        if hold is not None:  # the block is over: let an unreleased hold expire by its TTL
            self._forget(hold)
        if exc is None:
            raise error
        # The body already failed: keep its exception, but say what happened to the lock.
        logger.warning("release: lock %r on leaving a failed block: %s", self.name, error)
        exc.add_note(f"django-redis-locks: releasing {self.name!r} also failed: {error}")

    def _lost(self, hold: Hold, reason: str) -> LockLost:
        hold.mark_lost(reason)
        self._forget(hold)
        return LockLost(f"lock {self.name!r} was lost: {hold.lost_reason}")

    def _forget(self, hold: Hold) -> None:
        renewer().remove(hold)
        owner = hold.owner()
        if owner is not None and self._holds.get(owner) is hold:
            del self._holds[owner]

    def _on_hold_lost(self, reason: str) -> None:
        logger.warning("lost: lock %r: %s", self.name, reason)
        if self.on_lost is not None:
            self.on_lost(self, reason)

    # -- operations (sans I/O) -------------------------------------------------------------
    def _acquire(
        self, backend: Backend, blocking: bool | None, timeout: float | None
    ) -> Operation[Outcome]:
        blocking = self.blocking if blocking is None else _check_bool(blocking, "blocking")
        if timeout is not None and not blocking:
            raise InvalidArgument("timeout", "cannot be given with blocking=False")
        wait = check_wait(timeout, "timeout") if timeout is not None else self.blocking_timeout
        owner = current_owner()
        existing = self._current_hold()
        if existing is not None:
            if not existing.lost:
                raise LockAlreadyHeld(f"lock {self.name!r} is already held by this {_owner_kind()}")
            self._forget(existing)
        request = _Request(
            backend=backend,
            keys=self._lock_keys(backend),
            owner=owner,
            token=self._pending.pop(owner, "") or new_token(),
            ttl=self.timeout if self.timeout is not None else backend.default_timeout,
            metadata=holder_metadata(owner, self.metadata),
        )
        return self._acquire_steps(request, blocking, wait)

    def _acquire_steps(
        self, request: _Request, blocking: bool, wait: float | None
    ) -> Operation[Outcome]:
        deadline = None if wait is None else time.monotonic() + wait
        waiter = None
        try:
            while True:
                started = time.monotonic()
                result = yield from self._attempt(request)
                if isinstance(result, protocol.Acquired):
                    self._grant(request, result, started)
                    return Outcome(True)
                holder_left = result.holder_ttl_ms / 1000 if result.holder_ttl_ms >= 0 else None
                remaining = None if deadline is None else deadline - time.monotonic()
                if not blocking or (remaining is not None and remaining <= 0):
                    return Outcome(False, holder_left)
                if waiter is None:
                    # Register before the next attempt, so no release can slip in between.
                    waiter = yield Listen(request.keys.member, min(remaining or 1.0, 1.0))
                    continue
                pause = RECHECK_SECONDS
                if holder_left is not None:
                    pause = min(pause, max(holder_left, 0.001))
                if remaining is not None:
                    pause = min(pause, remaining)
                yield Wait(waiter, pause)
        finally:
            if waiter is not None:
                waiter.close()

    def _attempt(self, request: _Request) -> Operation[protocol.Acquired | protocol.Contended]:
        """One try: the acquire script, and with wait_for_replicas the WAIT (undone if short)."""
        needed = acked = 0
        try:
            if self.wait_for_replicas is None:
                reply = yield Eval(request.acquire_call())
            else:
                needed = yield from self._replicas_needed(request.keys)
                timeout_ms = to_millis(request.backend.replica_wait_timeout)
                reply, acked = yield EvalWait(request.acquire_call(), needed, timeout_ms)
        except LockBackendError:
            # The script may have run: a retry with this token will be recognised.
            self._pending[request.owner] = request.token
            raise
        except GeneratorExit:
            raise
        except BaseException:
            # Cancelled or interrupted mid-call: undo a grant we may never hear of.
            yield Detach(request.release_call())
            raise
        result = protocol.decode_acquire(reply)
        if isinstance(result, protocol.Acquired) and acked < needed:
            yield Eval(request.release_call())
            raise LockNotReplicated(
                f"lock {self.name!r}: {acked} of {needed} replicas acknowledged within "
                f"{request.backend.replica_wait_timeout} s; the acquire was undone"
            )
        return result

    def _replicas_needed(self, keys: LockKeys) -> Operation[int]:
        if self.wait_for_replicas != "majority":
            return int(self.wait_for_replicas or 0)
        role = yield Command(("ROLE",), keys.lock)
        replicas = len(role[2]) if len(role) > 2 else 0
        return replicas // 2 + 1 if replicas else 0

    def _grant(self, request: _Request, result: protocol.Acquired, started: float) -> None:
        self_ref = weakref.ref(self)

        def on_lost(reason: str) -> None:
            lock = self_ref()
            if lock is not None:
                lock._on_hold_lost(reason)

        hold = Hold(
            token=request.token,
            fence=result.fence,
            ttl=request.ttl,
            expires_at=started + result.ttl_ms / 1000,
            owner=weakref.ref(request.owner),
            backend=request.backend,
            keys=request.keys,
            on_lost=on_lost,
        )
        self._holds[request.owner] = hold
        if self.auto_renew:
            renewer().add(_Renewal(self, hold))

    def _release(self, hold: Hold) -> Operation[None]:
        renewer().remove(hold)
        if hold.lost:
            self._forget(hold)
            raise LockLost(f"lock {self.name!r} was lost: {hold.lost_reason}")
        call = protocol.release_call(hold.keys, hold.token, hold.backend.keys.channel)
        # On a Redis error the hold is kept, so the caller may retry: a repeated release of
        # the same token is recognised by the script.
        code = protocol.decode_release((yield Eval(call)))
        if code == protocol.RELEASED:
            self._forget(hold)
            return
        raise self._lost(hold, _loss_reason(code))

    def _extend(self, hold: Hold, seconds: float, replace: bool) -> Operation[float]:
        ms = to_millis(check_ttl(seconds, "seconds"))
        replace = _check_bool(replace, "replace")
        if hold.lost:
            raise self._lost(hold, hold.lost_reason or "")
        started = time.monotonic()
        call = protocol.extend_call(
            hold.keys, hold.token, ms, "set" if replace else "add", _MAX_TTL_MS
        )
        reply = yield Eval(call)
        new_ttl_ms = protocol.decode_extend(reply)
        if new_ttl_ms is None:
            raise self._lost(hold, _loss_reason(protocol.extend_failure(reply)))
        hold.expires_at = started + new_ttl_ms / 1000
        return new_ttl_ms / 1000

    def _state(self, backend: Backend, hold: Hold | None) -> Operation[protocol.LockState]:
        keys = hold.keys if hold is not None else self._lock_keys(backend)
        state = protocol.decode_state(
            (yield Eval(protocol.state_call(keys, hold.token if hold is not None else None)))
        )
        if hold is not None and not state.owned:
            self._lost(hold, "it expired or was taken over")
        return state

    def _ensure(self, hold: Hold) -> Operation[float]:
        if hold.lost:
            raise self._lost(hold, hold.lost_reason or "")
        try:
            state = yield from self._state(hold.backend, hold)
        except LockBackendError as error:
            if hold.local_time_left() <= 0:
                raise self._lost(
                    hold, f"its TTL ran out while Redis could not be reached ({error})"
                ) from error
            raise
        if not state.owned:
            raise LockLost(f"lock {self.name!r} was lost: {hold.lost_reason}")
        return (state.ttl_ms or 0) / 1000


LockError_ = LockNotOwned | LockBackendError


@dataclass(frozen=True, slots=True)
class _Request:
    """One acquire call: where, by whom, with which token, TTL and holder metadata."""

    backend: Backend
    keys: LockKeys
    owner: Any
    token: str
    ttl: float
    metadata: str

    def acquire_call(self) -> Call:
        return protocol.acquire_call(self.keys, self.token, to_millis(self.ttl), self.metadata)

    def release_call(self) -> Call:
        return protocol.release_call(self.keys, self.token, self.backend.keys.channel)


class _Renewal:
    """A held lock as the renewer sees it."""

    def __init__(self, lock: Lock, hold: Hold) -> None:
        self.hold = hold
        self._lock = weakref.ref(lock)
        self._name = lock.name
        self._call = protocol.extend_call(
            hold.keys, hold.token, to_millis(hold.ttl), "max", _MAX_TTL_MS
        )

    def renew_call(self) -> Call:
        return self._call

    def renewed(self, reply: Any, sent_at: float) -> str | None:
        new_ttl_ms = protocol.decode_extend(reply)
        if new_ttl_ms is None:
            return _loss_reason(protocol.extend_failure(reply))
        self.hold.expires_at = sent_at + new_ttl_ms / 1000
        return None

    def alive(self) -> str | None:
        owner = self.hold.owner()
        if owner is None or not owner_alive(owner):
            return f"the owner of lock {self._name!r} ended without releasing it"
        if self._lock() is None:
            return f"lock {self._name!r} was garbage-collected while held"
        return None


def _loss_reason(code: int) -> str:
    if code == protocol.OTHER_HOLDER:
        return "it expired and another holder took it"
    return "it expired or was removed"


def _owner_kind() -> str:
    owner = current_owner()
    return "thread" if owner.__class__.__name__.endswith("Thread") else "task"


def _check_bool(value: object, argument: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentType(argument, f"must be True or False, not {value!r}")
    return value


def _check_replicas(value: object) -> Replicas | None:
    if value is None or value == "majority":
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentType(
            "wait_for_replicas", f"must be an int, 'majority' or None, not {value!r}"
        )
    if value < 0 or value > 100:
        raise InvalidArgument("wait_for_replicas", f"must be from 0 to 100 (got {value})")
    return value

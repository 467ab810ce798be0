"""What locks and semaphores share: per-owner holds, the acquire loop, release, renewal.

A primitive is held by *owners* (threads or asyncio tasks), each with its own token, so one
object may be shared without one owner releasing another's hold. Every operation is written
once as a generator of effects (see :mod:`.driver`); the sync methods run it with
:func:`drive`, their ``a``-prefixed twins with :func:`adrive`. Subclasses supply the scripts.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, Generic, Literal, Protocol, Self, TypeVar

from . import replies
from .backend import Backend, backend_for_client, resolve_backend
from .driver import Detach, Eval, Listen, Operation, Wait, adrive, drive
from .errors import (
    InvalidArgument,
    InvalidArgumentType,
    LockAlreadyHeld,
    LockBackendError,
    LockError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
)
from .events import Event, EventType, emit, listening
from .holds import (
    Hold,
    check_metadata,
    current_owner,
    holder_id,
    holder_metadata,
    metadata_json,
    new_token,
    owner_alive,
)
from .renewer import renewer
from .scripting import Call
from .validation import check_bool, check_name, check_ttl, check_wait

__all__ = ["HANDOVER_TRUST", "WAITER_LEASE_SECONDS", "Outcome", "Primitive", "Request"]

logger = logging.getLogger(__name__)

#: How long a blocked waiter keeps its place in a queue without coming back to ask. Waiters
#: ask at least every ``recheck_seconds``; one that crashed or stalled longer than this loses
#: its place (and takes a new one at the back when it asks again).
WAITER_LEASE_SECONDS = 5.0
#: A hold handed over by a release is trusted without a round trip only while more than this
#: share of its TTL is left by the local estimate (which dates the grant from the server's
#: clock, on the safe side); an older hand-over is checked with the next attempt.
HANDOVER_TRUST = 0.5


class _Keys(Protocol):
    @property
    def member(self) -> str:
        """Registry member and wake-up message ("lock:<name>", "sem:<name>")."""


K = TypeVar("K", bound=_Keys)  # the primitive's keys (LockKeys, SemaphoreKeys)
LostCallback = Callable[[Any, str], None]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an acquire came to: acquired, or not and how long the (first) holder has left."""

    acquired: bool
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class Request(Generic[K]):
    """One acquire call: where, by whom, with which token, TTL and holder metadata."""

    backend: Backend
    keys: K
    owner: Any
    token: str
    ttl: float
    metadata: str


class Primitive(Generic[K]):
    """Base of :class:`Lock` and :class:`Semaphore`; see their docs for the public API.

    Subclasses set ``kind`` and ``recheck_seconds`` and implement the ``_``-prefixed hooks
    below that raise NotImplementedError.
    """

    #: Word used in messages and in the registry ("lock", "semaphore").
    kind: ClassVar[Literal["lock", "semaphore"]]
    #: Longest a blocked waiter sleeps between attempts when no release wakes it: a lost
    #: notification costs at most this much latency.
    recheck_seconds: ClassVar[float] = 1.0

    def __init__(
        self,
        name: str,
        *,
        timeout: float | None,
        using: str | None,
        client: Any,
        blocking: bool,
        blocking_timeout: float | None,
        auto_renew: bool,
        metadata: Mapping[str, Any] | None,
        on_lost: LostCallback | None,
    ) -> None:
        self.name = check_name(name)
        self.timeout = None if timeout is None else check_ttl(timeout, "timeout")
        if using is not None and not isinstance(using, str):
            raise InvalidArgumentType("using", f"must be a str or None, not {type(using).__name__}")
        if using is not None and client is not None:
            raise InvalidArgument("using", "give either using= or client=, not both")
        self.using = using
        self.blocking = check_bool(blocking, "blocking")
        self.blocking_timeout = check_wait(blocking_timeout)
        self.auto_renew = check_bool(auto_renew, "auto_renew")
        self.metadata = check_metadata(metadata)
        self._metadata_json = metadata_json(self.metadata)
        if on_lost is not None and not callable(on_lost):
            raise InvalidArgumentType("on_lost", "must be callable or None")
        self.on_lost = on_lost
        self._backend: Backend | None = None
        if client is not None:
            self._backend = client if isinstance(client, Backend) else backend_for_client(client)
        self._holds: weakref.WeakKeyDictionary[Any, Hold] = weakref.WeakKeyDictionary()
        self._pending: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._keys: tuple[str, K] | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    # -- hooks for subclasses --------------------------------------------------------------
    def _make_keys(self, backend: Backend) -> K:
        raise NotImplementedError

    def _attempt(
        self, request: Request[K], queue: bool
    ) -> Operation[replies.Acquired | replies.Contended]:
        """One try. With ``queue`` a primitive with a queue keeps (or takes) a place in it."""
        raise NotImplementedError

    def _release_call(self, keys: K, token: str) -> Call:
        """Release ``token``'s hold; for queued primitives, also leave the queue."""
        raise NotImplementedError

    def _renew_call(self, hold: Hold) -> Call:
        """Top up ``hold`` to its full TTL (a ``{1, ttl_ms, now_ms}`` / ``{0}`` reply)."""
        raise NotImplementedError

    def _probe(self, hold: Hold) -> Operation[int | None]:
        """The hold's remaining TTL in ms as Redis sees it, None if it is gone."""
        raise NotImplementedError

    def _not_acquired(self, outcome: Outcome) -> LockNotAcquired:
        raise NotImplementedError

    def _wake_message(self, request: Request[K]) -> str:
        """The key under which releases wake this request's waiter: each waiter is told apart
        by its holder id, so a release wakes only the waiter it lets in."""
        return f"{request.keys.member}#{holder_id(request.token)}"

    def _handed(self, payload: str) -> replies.Acquired | float:
        """What a release said with a wake-up (see :mod:`.wakeup`): the grant it handed over,
        or how many seconds to wait before trying again."""
        return replies.decode_handover(payload)

    # -- public API: sync ------------------------------------------------------------------
    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Take it; True if taken, False if not available and waiting ended.

        ``blocking`` (default: the object's) waits for a release, up to ``timeout`` seconds
        (default: the object's ``blocking_timeout``; None waits as long as it takes).
        Raises LockAlreadyHeld if this thread/task holds it already, LockBackendError when
        Redis fails.
        """
        backend = self.backend
        return drive(self._acquire(backend, blocking, timeout), backend).acquired

    def release(self) -> None:
        """Release this thread's/task's hold.

        Raises LockNotOwned if it holds nothing, LockLost if the hold had expired, been taken
        over or force-released (Redis is left untouched then), LockBackendError when Redis
        fails (the hold is kept, so the release can be retried).
        """
        hold = self._require_hold()
        drive(self._release(hold), hold.backend)

    def ensure_held(self) -> float:
        """Return the seconds left on this thread's/task's hold; raise LockLost if it is gone.

        Raises LockNotOwned if nothing was acquired, LockBackendError if Redis cannot tell
        (but LockLost if, in addition, the hold's TTL has run out locally).
        """
        hold = self._require_hold()
        return drive(self._ensure(hold), hold.backend)

    def __enter__(self) -> Self:
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

    async def aensure_held(self) -> float:
        """Asyncio twin of :meth:`ensure_held`."""
        hold = self._require_hold()
        return await adrive(self._ensure(hold), hold.backend)

    async def __aenter__(self) -> Self:
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
        """The Backend this object talks to (the ``using`` alias is resolved on each call)."""
        return self._backend if self._backend is not None else resolve_backend(self.using)

    @property
    def holder_id(self) -> str | None:
        """The public id of this thread's/task's hold, as listings show it (None: not held).

        Safe to log and to show: it identifies the hold without revealing its token.
        """
        hold = self._current_hold()
        return None if hold is None else hold.holder_id

    def _keys_for(self, backend: Backend) -> K:
        cached = self._keys
        if cached is None or cached[0] != backend.keys.namespace:
            cached = self._keys = (backend.keys.namespace, self._make_keys(backend))
        return cached[1]

    def _current_hold(self, owner: Any = None) -> Hold | None:
        hold = self._holds.get(current_owner() if owner is None else owner)
        if hold is not None and hold.pid != os.getpid():
            return None  # the parent's hold, seen from a forked child
        return hold

    def _require_hold(self) -> Hold:
        hold = self._current_hold()
        if hold is None:
            raise LockNotOwned(f"{self.kind} {self.name!r} is not held by this {_owner_kind()}")
        return hold

    def _release_failed_on_exit(
        self, error: LockNotOwned | LockBackendError, exc: BaseException | None
    ) -> None:
        hold = self._current_hold()
        if hold is not None:  # the block is over: let an unreleased hold expire by its TTL
            self._forget(hold)
        if exc is None:
            raise error
        # The body already failed: keep its exception, but say what happened to the hold.
        logger.warning("release: %s %r on leaving a failed block: %s", self.kind, self.name, error)
        exc.add_note(f"django-redis-locks: releasing {self.name!r} also failed: {error}")

    def _lost(self, hold: Hold, reason: str) -> LockLost:
        hold.mark_lost(reason)
        self._forget(hold)
        return LockLost(f"{self.kind} {self.name!r} was lost: {hold.lost_reason}")

    def _forget(self, hold: Hold) -> None:
        if hold.renewed:
            renewer().remove(hold)
        owner = hold.owner()
        if owner is not None and self._holds.get(owner) is hold:
            del self._holds[owner]

    def _on_hold_lost(self, hold: Hold, reason: str) -> None:
        logger.warning("lost: %s %r (holder %s): %s", self.kind, self.name, hold.holder_id, reason)
        self._emit("lost", hold, reason=reason)
        if self.on_lost is not None:
            self.on_lost(self, reason)

    def _emit(
        self,
        event: EventType,
        hold: Hold | None,
        *,
        reason: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        if listening(event):
            label = self.metadata.get("label")
            emit(
                Event(
                    event=event,
                    kind=self.kind,
                    name=self.name,
                    holder_id=None if hold is None else hold.holder_id,
                    fence=None if hold is None else hold.fence,
                    label=None if label is None else str(label),
                    reason=reason,
                    retry_after=retry_after,
                )
            )

    # -- operations (sans I/O) -------------------------------------------------------------
    def _acquire(
        self, backend: Backend, blocking: bool | None, timeout: float | None
    ) -> Operation[Outcome]:
        blocking = self.blocking if blocking is None else check_bool(blocking, "blocking")
        if timeout is not None and not blocking:
            raise InvalidArgument("timeout", "cannot be given with blocking=False")
        wait = check_wait(timeout, "timeout") if timeout is not None else self.blocking_timeout
        owner = current_owner()
        existing = self._current_hold(owner)
        if existing is not None:
            if not existing.lost:
                raise LockAlreadyHeld(
                    f"{self.kind} {self.name!r} is already held by this {_owner_kind()}"
                )
            self._forget(existing)
        request = Request(
            backend=backend,
            keys=self._keys_for(backend),
            owner=owner,
            token=self._pending.pop(owner, "") or new_token(),
            ttl=self.timeout if self.timeout is not None else backend.default_timeout,
            metadata=holder_metadata(owner, self._metadata_json),
        )
        return self._acquire_steps(request, blocking, wait)

    def _acquire_steps(
        self, request: Request[K], blocking: bool, wait: float | None
    ) -> Operation[Outcome]:
        deadline = None if wait is None else time.monotonic() + wait
        waiter = None
        attempting = queued = False
        # Server clock minus local monotonic clock, from the last refusal: it dates a
        # hand-over. Taken with the local time the request was sent, so a grant is dated no
        # later than it happened (and a hold's end estimated no later than its real end).
        offset: float | None = None
        try:
            if blocking and request.backend.hub().ready:
                # The process listens already: register at once, so that a release between
                # the first attempt and the wait cannot slip by, and no second try is needed.
                waiter = yield Listen(self._wake_message(request), 1.0)
            while True:
                started = time.monotonic()
                attempting = True
                result = yield from self._attempt(request, blocking)
                attempting = False
                if isinstance(result, replies.Acquired):
                    self._grant(request, result, started)
                    return Outcome(True)
                queued = queued or result.position > 0
                if result.server_now_ms is not None:
                    offset = result.server_now_ms / 1000 - started
                holder_left = result.holder_ttl_ms / 1000 if result.holder_ttl_ms >= 0 else None
                remaining = None if deadline is None else deadline - time.monotonic()
                if not blocking or (remaining is not None and remaining <= 0):
                    if queued:
                        yield from self._leave_queue(request)
                    logger.debug("acquire: %s %r is taken", self.kind, self.name)
                    self._emit("contended", None, retry_after=holder_left)
                    return Outcome(False, holder_left)
                if waiter is None:
                    # Register before the next attempt, so no release can slip in between.
                    waiter = yield Listen(self._wake_message(request), min(remaining or 1.0, 1.0))
                    continue
                pause = self._pause(holder_left, remaining)
                handed = yield from self._wait_turn(waiter, pause, remaining)
                granted = _trusted(handed, offset)
                if handed is not None and granted is not None:
                    # The release made this waiter the holder: no further round trip.
                    self._grant(request, handed, granted)
                    return Outcome(True)
        except LockBackendError:
            if attempting:
                # The script may have run: a retry with this token will be recognised (and
                # keeps its place in a queue).
                self._pending[request.owner] = request.token
            raise
        except (GeneratorExit, LockError):
            raise
        except BaseException:
            if attempting or queued:
                # Cancelled or interrupted: undo a grant we may never hear of, leave the queue.
                yield Detach(self._release_call(request.keys, request.token))
            raise
        finally:
            if waiter is not None:
                waiter.close()

    def _pause(self, holder_left: float | None, remaining: float | None) -> float:
        """How long to wait for a wake-up before trying again: a re-check, no longer than the
        holder's remaining TTL nor the time left to wait."""
        pause = self.recheck_seconds
        if holder_left is not None:
            pause = min(pause, max(holder_left, 0.001))
        if remaining is not None:
            pause = min(pause, remaining)
        return pause

    def _wait_turn(
        self, waiter: Any, pause: float, remaining: float | None
    ) -> Operation[replies.Acquired | None]:
        """Wait for a wake-up, at most ``pause`` seconds; return the grant a release handed
        over, or None to try again."""
        while True:
            said = yield Wait(waiter, pause)
            if not said:
                return None  # timed out, or woken to try again
            news = self._handed(said)
            if isinstance(news, replies.Acquired):
                return news
            # Kept for its holder's slice a little longer: wait that long (or for a hand-over).
            pause = news if remaining is None else min(news, max(remaining, 0.0))

    def _leave_queue(self, request: Request[K]) -> Operation[None]:
        call = self._release_call(request.keys, request.token)
        try:
            yield Eval(call)
        except LockBackendError as error:  # the place's lease runs out on its own
            logger.warning(
                "acquire: %s %r: leaving the queue failed: %s", self.kind, self.name, error
            )

    @staticmethod
    def _channel(request: Request[K]) -> str:
        """The asking process's wake-up channel, recorded with a place in a queue."""
        return request.backend.hub().channel

    def _grant(self, request: Request[K], result: replies.Acquired, started: float) -> None:
        """Record the hold; ``started`` is a local time no later than the grant."""
        self_ref = weakref.ref(self)

        def on_lost(reason: str) -> None:
            primitive = self_ref()
            if primitive is not None:
                primitive._on_hold_lost(hold, reason)

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
            hold.renewed = True
            renewer().add(_Renewal(self, hold))
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "acquire: %s %r (holder %s, fence %s)",
                self.kind,
                self.name,
                hold.holder_id,
                hold.fence,
            )
        self._emit("acquired", hold)

    def _release(self, hold: Hold) -> Operation[None]:
        if hold.renewed:
            renewer().remove(hold)
        if hold.lost:
            self._forget(hold)
            raise LockLost(f"{self.kind} {self.name!r} was lost: {hold.lost_reason}")
        call = self._release_call(hold.keys, hold.token)
        # On a Redis error the hold is kept, so the caller may retry.
        retry = hold.release_sent
        hold.release_sent = True
        code = yield Eval(call)
        if int(code) == replies.RELEASED or (retry and int(code) == replies.NOT_HELD):
            # (A retry that finds nothing held: the first attempt released it, and its reply
            # was lost. Locks even recognise their own token; see lock_release.lua.)
            self._forget(hold)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("release: %s %r (holder %s)", self.kind, self.name, hold.holder_id)
            self._emit("released", hold)
            return
        raise self._lost(hold, replies.loss_reason(int(code)))

    def _ensure(self, hold: Hold) -> Operation[float]:
        if hold.lost:
            raise self._lost(hold, hold.lost_reason or "")
        try:
            ttl_ms = yield from self._probe(hold)
        except LockBackendError as error:
            if hold.local_time_left() <= 0:
                raise self._lost(
                    hold, f"its TTL ran out while Redis could not be reached ({error})"
                ) from error
            raise
        if ttl_ms is None:
            raise self._lost(hold, hold.lost_reason or "it expired or was removed")
        return ttl_ms / 1000


class _Renewal:
    """A held primitive as the renewer sees it."""

    def __init__(self, primitive: Primitive[Any], hold: Hold) -> None:
        self.hold = hold
        self._primitive = weakref.ref(primitive)
        self._label = f"{primitive.kind} {primitive.name!r}"
        self._call = primitive._renew_call(hold)

    def renew_call(self) -> Call:
        return self._call

    def renewed(self, reply: Any, sent_at: float) -> str | None:
        new_ttl_ms = replies.decode_renewal(reply)
        if new_ttl_ms is None:
            return replies.loss_reason(int(reply[0]))
        self.hold.expires_at = sent_at + new_ttl_ms / 1000
        return None

    def alive(self) -> str | None:
        owner = self.hold.owner()
        if owner is None or not owner_alive(owner):
            return f"the owner of {self._label} ended without releasing it"
        if self._primitive() is None:
            return f"{self._label} was garbage-collected while held"
        return None


def _trusted(handed: replies.Acquired | None, offset: float | None) -> float | None:
    """The local time a hand-over was granted, if it can be trusted without a round trip.

    Not when the news comes late (the waiter was stopped or starved after the grant) and
    less than HANDOVER_TRUST of the TTL may be left: then the next attempt tells whether the
    hold is still there.
    """
    if handed is None or offset is None:
        return None
    granted = handed.server_now_ms / 1000 - offset
    left = granted + handed.ttl_ms / 1000 - time.monotonic()
    return granted if left > handed.ttl_ms / 1000 * HANDOVER_TRUST else None


def _owner_kind() -> str:
    owner = current_owner()
    return "thread" if owner.__class__.__name__.endswith("Thread") else "task"

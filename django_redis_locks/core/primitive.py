"""What locks and semaphores share: the public API, per-owner holds, release and checks.

A primitive is held by *owners* (threads, greenlets or asyncio tasks; see
:mod:`.runtime.ownership`), each with its own token, so one object may be shared without one owner
releasing another's hold. Every operation is written once as a generator of effects (see
:mod:`.runtime.driver`); the sync methods run it with :func:`drive`, their ``a``-prefixed twins with
:func:`adrive`. The acquire loop lives in :mod:`.runtime.acquiring`, a hold's lifecycle in
:mod:`.runtime.holds`, renewal in :mod:`.runtime.renewal`. Subclasses supply the scripts.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, ClassVar, Generic, Literal, Self, TypeVar

from .connection.backend import Backend, backend_for_client, resolve_backend
from .errors import (
    InvalidArgument,
    InvalidArgumentType,
    LockAlreadyHeld,
    LockBackendError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
)
from .events import Event, EventType, emit, listening
from .protocol import replies
from .protocol.holder import check_metadata, holder_metadata, metadata_json, new_token
from .protocol.scripting import Call
from .runtime.acquiring import Keys, Outcome, Request, acquire_steps, lifetime
from .runtime.driver import Detach, Eval, Operation, adrive, drive
from .runtime.exiting import quiet_at_exit
from .runtime.holds import Hold, HoldTable, State
from .runtime.ownership import bound_to_caller, current_owner, owner_alive, owner_kind
from .runtime.renewal import renewer
from .runtime.renewal_work import Renewal
from .validation import check_bool, check_metric_name, check_name, check_ttl, check_wait

__all__ = ["Primitive"]

logger = quiet_at_exit(logging.getLogger(__name__))

K = TypeVar("K", bound=Keys)  # the primitive's keys (LockKeys, SemaphoreKeys)
LostCallback = Callable[[Any, str], None]


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
        metric_name: str | None = None,
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
        self.metric_name = check_metric_name(metric_name)
        self._backend: Backend | None = None
        if client is not None:
            self._backend = client if isinstance(client, Backend) else backend_for_client(client)
        self._holds = HoldTable()
        self._keys: tuple[str, K] | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    def _derived(self, name: str, metadata: dict[str, Any], metadata_json: str) -> Self:
        """A new object with this one's options for ``name`` and ``metadata`` (both checked
        already; ``metadata_json`` as :func:`.protocol.holder.metadata_json` gives it): what the
        decorator makes per call, without checking the same options again."""
        derived = object.__new__(type(self))
        derived.__dict__.update(self.__dict__)
        derived.name = name
        derived.metadata = metadata
        derived._metadata_json = metadata_json
        derived._holds = HoldTable()
        derived._keys = None
        return derived

    # -- hooks for subclasses --------------------------------------------------------------
    def _make_keys(self, backend: Backend) -> K:
        raise NotImplementedError

    def _attempt(
        self, request: Request[Any], queue: bool
    ) -> Operation[replies.Acquired | replies.Contended | replies.TooLate | replies.Evicted]:
        """One try (its script with a deadline, through :meth:`.runtime.acquiring.Request.ask`, and
        the reply's server time to :meth:`.runtime.acquiring.Request.answered`). With ``queue`` a
        primitive with a queue keeps (or takes) a place in it."""
        raise NotImplementedError

    def _release_call(self, keys: K, token: str, fence: int | None = None) -> Call:
        """Release ``token``'s hold; for queued primitives, also leave the queue. ``fence``:
        the owner's hold's fence (ticket), so that a later grant of the token (a late copy of
        its acquire) is released too but reported as the hold's loss; None: whatever the
        token holds (undoing what a request may have made)."""
        raise NotImplementedError

    def _renew_call(self, hold: Hold) -> Call:
        """Top up ``hold`` to its full TTL (a ``{1, ttl_ms, now_ms}`` / ``{0}`` reply)."""
        raise NotImplementedError

    def _probe(self, hold: Hold) -> Operation[int | None]:
        """The hold's remaining TTL in ms as Redis sees it, None if it is gone. No side
        effects on the hold."""
        raise NotImplementedError

    def _not_acquired(self, outcome: Outcome) -> LockNotAcquired:
        raise NotImplementedError

    # -- public API: sync ------------------------------------------------------------------
    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Take it; True if taken, False if not available and waiting ended.

        ``blocking`` (default: the object's) waits for a release, up to ``timeout`` seconds
        (default: the object's ``blocking_timeout``; None waits as long as it takes).
        Raises LockAlreadyHeld if this thread/greenlet/task holds it already, LockBackendError
        when Redis fails (an acquire that may have reached Redis is undone in the background).
        """
        backend = self.backend
        operation = self._acquire(backend, current_owner(), blocking, timeout)
        return drive(operation, backend).acquired

    def release(self) -> None:
        """Release this thread's/greenlet's/task's hold.

        Raises LockNotOwned if it holds nothing, LockLost if the hold had expired, been taken
        over or force-released (Redis is left untouched then), LockBackendError when Redis
        fails (the release is retried in the background, and may be retried by calling again).
        """
        hold = self._require_hold(current_owner())
        drive(self._release(hold), hold.backend)

    def ensure_held(self) -> float:
        """Return the seconds left on this owner's hold; raise LockLost if it is gone.

        Raises LockNotOwned if nothing was acquired, LockBackendError if Redis cannot tell
        (but LockLost if, in addition, the hold's TTL has run out locally).
        """
        hold = self._require_hold(current_owner())
        return drive(self._ensure(hold), hold.backend)

    def __enter__(self) -> Self:
        backend = self.backend
        outcome = drive(self._acquire(backend, current_owner(), None, None), backend)
        if not outcome.acquired:
            raise self._not_acquired(outcome)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        owner = current_owner()
        try:
            hold = self._require_hold(owner)
            drive(self._release(hold), hold.backend)
        except (LockNotOwned, LockBackendError) as error:
            self._release_failed_on_exit(owner, error, exc)

    # -- public API: asyncio (each bound to the task that calls it; see .ownership) ----------
    @bound_to_caller
    async def aacquire(
        self, owner: Any, blocking: bool | None = None, timeout: float | None = None
    ) -> bool:
        """Asyncio twin of :meth:`acquire`. The hold belongs to the task that calls this,
        also when the coroutine runs in a task of its own (``wait_for``, ``gather``,
        ``shield``)."""
        backend = self.backend
        operation = self._acquire(backend, owner or current_owner(), blocking, timeout)
        return (await adrive(operation, backend)).acquired

    @bound_to_caller
    async def arelease(self, owner: Any) -> None:
        """Asyncio twin of :meth:`release`."""
        hold = self._require_hold(owner or current_owner())
        await adrive(self._release(hold), hold.backend)

    @bound_to_caller
    async def aensure_held(self, owner: Any) -> float:
        """Asyncio twin of :meth:`ensure_held`."""
        hold = self._require_hold(owner or current_owner())
        return await adrive(self._ensure(hold), hold.backend)

    async def __aenter__(self) -> Self:
        backend = self.backend
        outcome = await adrive(self._acquire(backend, current_owner(), None, None), backend)
        if not outcome.acquired:
            raise self._not_acquired(outcome)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        owner = current_owner()
        try:
            hold = self._require_hold(owner)
            await adrive(self._release(hold), hold.backend)
        except (LockNotOwned, LockBackendError) as error:
            self._release_failed_on_exit(owner, error, exc)

    # -- plumbing --------------------------------------------------------------------------
    @property
    def backend(self) -> Backend:
        """The Backend this object talks to (the ``using`` alias is resolved on each call)."""
        return self._backend if self._backend is not None else resolve_backend(self.using)

    @property
    def holder_id(self) -> str | None:
        """The public id of this owner's hold, as listings show it (None: not held).

        Safe to log and to show: it identifies the hold without revealing its token.
        """
        hold = self._current_hold(current_owner())
        return None if hold is None else hold.holder_id

    def _keys_for(self, backend: Backend) -> K:
        cached = self._keys
        if cached is None or cached[0] != backend.keys.namespace:
            cached = self._keys = (backend.keys.namespace, self._make_keys(backend))
        return cached[1]

    def _current_hold(self, owner: Any = None) -> Hold | None:
        return self._holds.get(current_owner() if owner is None else owner)

    def _require_hold(self, owner: Any) -> Hold:
        hold = self._current_hold(owner)
        if hold is None:
            raise LockNotOwned(f"{self.kind} {self.name!r} is not held by this {owner_kind(owner)}")
        return hold

    def _release_failed_on_exit(
        self, owner: Any, error: LockNotOwned | LockBackendError, exc: BaseException | None
    ) -> None:
        hold = self._current_hold(owner)
        if hold is not None:  # the block is over (a failed release goes on in the background)
            self._forget(hold)
        if exc is None:
            raise error
        # The body already failed: keep its exception, but say what happened to the hold.
        logger.warning("release: %s %r on leaving a failed block: %s", self.kind, self.name, error)
        exc.add_note(f"django-redis-locks: releasing {self.name!r} also failed: {error}")

    def _lost(self, hold: Hold, reason: str) -> LockLost:
        """The owner's own call found ``hold`` gone: report it (once), forget it."""
        if hold.lose(reason):
            hold.report_lost()
        self._forget(hold)
        return LockLost(f"{self.kind} {self.name!r} was lost: {hold.lost_reason or reason}")

    def _forget(self, hold: Hold) -> None:
        if hold.renewed:
            renewer().remove(hold)
        hold.end()
        self._watch_copies(hold)
        self._holds.drop(hold)

    def _watch_copies(self, hold: Hold) -> None:
        """The hold is over for its owner: if a late copy of its acquire may still land (the
        acquire went out more than once), have the renewer undo it until no copy can (once;
        see :mod:`.runtime.deadlines`). A hold that ended in Redis before its owner learned
        it (lost: it expired, was removed, force-released; or it ran out unrenewed) ended at
        a moment unknown: a copy may have landed since, within its deadline, and taken the
        name or a place in the queue for the token, so the token is released at once, even
        when no copy can land any more."""
        until, hold.copies_until = hold.copies_until, 0.0
        if not until:
            return
        unseen = hold.state is State.LOST or (hold.state is State.ENDED and not hold.release_sent)
        if unseen or until > time.monotonic():
            renewer().watch(
                hold.backend,
                self._release_call(hold.keys, hold.token),
                until,
                lifetime(hold.ttl),
                f"late copies of the acquire of {self.kind} {self.name!r}",
                now=unseen,
            )

    def _on_hold_lost(self, hold: Hold, reason: str) -> None:
        self._watch_copies(hold)  # (the owner may not call again soon)
        logger.warning("lost: %s %r (holder %s): %s", self.kind, self.name, hold.holder_id, reason)
        self._emit("lost", hold, reason=reason, held=time.monotonic() - hold.granted_at)
        if self.on_lost is not None:
            self.on_lost(self, reason)

    def _emit(
        self,
        event: EventType,
        hold: Hold | None,
        *,
        reason: str | None = None,
        retry_after: float | None = None,
        waited: float | None = None,
        held: float | None = None,
        handed_over: bool | None = None,
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
                    waited=waited,
                    held=held,
                    metric_name=self.metric_name,
                    handed_over=handed_over,
                )
            )

    # -- operations (sans I/O) -------------------------------------------------------------
    def _acquire(
        self, backend: Backend, owner: Any, blocking: bool | None, timeout: float | None
    ) -> Operation[Outcome]:
        blocking = self.blocking if blocking is None else check_bool(blocking, "blocking")
        if timeout is not None and not blocking:
            raise InvalidArgument("timeout", "cannot be given with blocking=False")
        wait = check_wait(timeout, "timeout") if timeout is not None else self.blocking_timeout
        existing = self._current_hold(owner)
        if existing is not None:
            yield from self._retire(existing, owner)
        request = Request(
            backend=backend,
            keys=self._keys_for(backend),
            owner=owner,
            token=new_token(),
            ttl=self.timeout if self.timeout is not None else backend.default_timeout,
            metadata=holder_metadata(owner, self._metadata_json),
        )
        return (yield from acquire_steps(self, request, blocking, wait))

    def _retire(self, hold: Hold, owner: Any) -> Operation[None]:
        """Before a new acquire by an owner that has a hold on record: refuse if Redis says
        it is still held (not re-entrant), else forget it. A hold that ran out unrenewed is
        no hold; one the renewer kept alive and yet is gone was lost."""
        if hold.state is State.HELD:
            ttl_ms = yield from self._probe(hold)
            if ttl_ms is not None:
                raise LockAlreadyHeld(
                    f"{self.kind} {self.name!r} is already held by this {owner_kind(owner)}"
                )
            if hold.renewed:
                self._lost(hold, "it expired or was removed")
            else:
                logger.debug("acquire: %s %r: the previous hold expired", self.kind, self.name)
        # RELEASING: a release that failed is being retried in the background.
        self._forget(hold)

    def _grant(self, request: Request[Any], result: replies.Acquired, started: float) -> None:
        """Record the hold; ``started`` is a local time no later than the grant."""
        self_ref = weakref.ref(self)

        def on_lost(reason: str) -> None:
            primitive = self_ref()
            if primitive is not None:
                primitive._on_hold_lost(hold, reason)

        def on_renew_failed(reason: str) -> None:
            primitive = self_ref()
            if primitive is not None:
                primitive._emit("renew_failed", hold, reason=reason)

        hold = Hold(
            token=request.token,
            fence=result.fence,
            ttl=request.ttl,
            expires_at=started + result.ttl_ms / 1000,
            owner=weakref.ref(request.owner),
            backend=request.backend,
            keys=request.keys,
            on_lost=on_lost,
            copies_until=request.copies_until,
        )
        request.copies_until = 0.0  # (the hold's to watch now)
        try:
            self._holds.put(request.owner, hold)
            if self.auto_renew:
                hold.renewed = True
                hold.on_renew_failed = on_renew_failed
                renewer().add(
                    Renewal(
                        hold,
                        self._renew_call(hold),
                        f"{self.kind} {self.name!r}",
                        _stop(self, hold),
                    )
                )
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug(
                    "acquire: %s %r (holder %s, fence %s)",
                    self.kind,
                    self.name,
                    hold.holder_id,
                    hold.fence,
                )
            self._emit(
                "acquired",
                hold,
                waited=hold.granted_at - request.asked_at,
                handed_over=result.retried,
            )
        except BaseException:
            # Interrupted (Ctrl-C) while recording: the acquire raises, and undoes the grant
            # in Redis (see acquiring.acquire_steps); the caller knows of no hold, so neither
            # does this process.
            self._forget(hold)
            raise

    @staticmethod
    def _channel(request: Request[Any]) -> str:
        """The asking process's wake-up channel, recorded with a place in a queue."""
        return request.backend.hub().channel

    def _contended(self, request: Request[Any], retry_after: float | None, blocking: bool) -> None:
        waited = time.monotonic() - request.asked_at
        self._emit(
            "timed_out" if blocking else "contended", None, retry_after=retry_after, waited=waited
        )

    def _release(self, hold: Hold) -> Operation[None]:
        if hold.renewed:
            renewer().remove(hold)
        if hold.lost or not hold.begin_release():
            self._forget(hold)
            raise LockLost(f"{self.kind} {self.name!r} was lost: {hold.lost_reason}")
        retry = hold.release_sent
        hold.release_sent = True
        call: Call | None = None
        try:
            # (Inside the try: a process's first release reads its script, where a Ctrl-C
            # may land too.)
            call = self._release_call(hold.keys, hold.token, hold.fence)
            code = int((yield Eval(call)))
        except LockBackendError:
            # It may have run. The renewer sends it again as soon as Redis answers; the
            # caller may retry too (both are recognised as the same release).
            assert call is not None  # (only the script's run raises it)
            renewer().reclaim(
                hold.backend,
                call,
                max(hold.local_time_left(), 0.0) + hold.ttl,
                f"a release whose reply never came ({self.kind} {self.name!r})",
            )
            self._watch_copies(hold)
            raise
        except GeneratorExit:
            raise
        except BaseException:
            # Cancelled or interrupted, maybe before the script went out: finish the release
            # whatever happens to the caller next (or leave it to the renewer).
            self._forget(hold)
            yield Detach(
                call if call is not None else self._release_call(hold.keys, hold.token),
                max(hold.local_time_left(), 0.0) + hold.ttl,
                f"an interrupted release of {self.kind} {self.name!r}",
            )
            raise
        done = code in (replies.RELEASED, replies.RELEASED_BEFORE)
        if done or (retry and code == replies.NOT_HELD):
            hold.released()
            self._forget(hold)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("release: %s %r (holder %s)", self.kind, self.name, hold.holder_id)
            self._emit("released", hold, held=time.monotonic() - hold.granted_at)
            return
        raise self._lost(hold, replies.loss_reason(code))

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
            raise self._lost(hold, "it expired or was removed")
        return ttl_ms / 1000


def _stop(primitive: Primitive[Any], hold: Hold) -> Callable[[], str | None]:
    """Why the renewer should stop renewing ``hold``: its owner ended, or its primitive was
    garbage-collected; None to go on."""
    primitive_ref = weakref.ref(primitive)
    label = f"{primitive.kind} {primitive.name!r}"

    def stop_reason() -> str | None:
        owner = hold.owner()
        if owner is None or not owner_alive(owner):
            return f"the owner of {label} ended without releasing it"
        if primitive_ref() is None:
            return f"{label} was garbage-collected while held"
        return None

    return stop_reason

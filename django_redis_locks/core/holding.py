"""A primitive's holds, from grant to release, as the base class of :class:`.primitive.Primitive`
(which adds the public API and the acquire): per-owner bookkeeping, events, release and checks.

Each owner (thread, greenlet or asyncio task) has at most one hold, in a
:class:`.runtime.holds.HoldTable`. A hold ends once for its owner (released, lost or given up
on); :meth:`Holding._forget` then stops its renewal and, if a late copy of its acquire may
still land, has the renewer watch for it (see :mod:`.runtime.deadlines`)."""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from typing import Any, ClassVar, Generic, Literal, TypeVar

from .errors import LockAlreadyHeld, LockBackendError, LockLost, LockNotOwned
from .hold_events import Telling
from .protocol import replies
from .protocol.scripting import Call
from .runtime.acquiring import Keys, Request, lifetime
from .runtime.driver import Detach, Eval, Operation
from .runtime.exiting import quiet_at_exit
from .runtime.holds import Hold, HoldTable, State
from .runtime.ownership import current_owner, owner_alive, owner_kind
from .runtime.renewal import renewer
from .runtime.renewal_work import Renewal

__all__ = ["Holding"]

logger = quiet_at_exit(logging.getLogger("django_redis_locks.core.primitive"))

K = TypeVar("K", bound=Keys)  # the primitive's keys (LockKeys, SemaphoreKeys)
LostCallback = Callable[[Any, str], None]


class Holding(Telling, Generic[K]):
    """The hold half of a primitive. Subclasses implement the hooks that raise
    NotImplementedError and set the attributes below."""

    #: Word used in messages and in the registry ("lock", "semaphore").
    kind: ClassVar[Literal["lock", "semaphore"]]
    name: str
    metadata: dict[str, Any]
    metric_name: str | None
    auto_renew: bool
    on_lost: LostCallback | None
    _holds: HoldTable

    # -- hooks for subclasses --------------------------------------------------------------
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

    # -- bookkeeping -----------------------------------------------------------------------
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

    # -- operations on a hold (sans I/O) ---------------------------------------------------
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
            else:  # (left to run out, maybe on purpose: no warning, no on_lost)
                logger.debug("acquire: %s %r: the previous hold expired", self.kind, self.name)
                self._emit("expired", hold, held=max(hold.expires_at - hold.granted_at, 0.0))
        # RELEASING: a release that failed is being retried in the background.
        self._forget(hold)

    def _grant(self, request: Request[Any], result: replies.Acquired, started: float) -> None:
        """Record the hold; ``started`` is a local time no later than the grant."""
        hold = Hold(
            token=request.token,
            fence=result.fence,
            ttl=request.ttl,
            expires_at=started + result.ttl_ms / 1000,
            owner=weakref.ref(request.owner),
            backend=request.backend,
            keys=request.keys,
            copies_until=request.copies_until,
        )
        request.copies_until = 0.0  # (the hold's to watch now)
        self._record(
            hold,
            request.owner,
            waited=hold.granted_at - request.asked_at,
            handed_over=result.retried,
        )

    def _record(self, hold: Hold, owner: Any, *, waited: float, handed_over: bool) -> None:
        """Make ``hold`` the owner's: renewed (with ``auto_renew``), told as acquired."""
        self_ref = weakref.ref(self)

        def on_lost(reason: str) -> None:
            primitive = self_ref()
            if primitive is not None:
                primitive._on_hold_lost(hold, reason)

        def on_renew_failed(reason: str) -> None:
            primitive = self_ref()
            if primitive is not None:
                primitive._emit("renew_failed", hold, reason=reason)

        hold.on_lost = on_lost
        try:
            self._holds.put(owner, hold)
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
            self._emit("acquired", hold, waited=waited, handed_over=handed_over)
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
            self._given_back(hold, "no reply: the release goes on in the background")
            raise
        except GeneratorExit:
            raise
        except BaseException:
            # Cancelled or interrupted, maybe before the script went out: finish the release
            # whatever happens to the caller next (or leave it to the renewer).
            self._forget(hold)
            self._given_back(hold, "interrupted: the release goes on in the background")
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
            self._given_back(hold)
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


def _stop(primitive: Holding[Any], hold: Hold) -> Callable[[], str | None]:
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

"""The distributed Lock: atomic acquire with a TTL, token-checked release/extend, fencing."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any, Literal

from .connection.backend import Backend
from .errors import (
    InvalidArgument,
    InvalidArgumentType,
    LockBackendError,
    LockNotAcquired,
    LockNotReplicated,
)
from .holding import LostCallback
from .primitive import Primitive
from .protocol import lock_calls as protocol
from .protocol import replies
from .protocol.holder import with_renewal
from .protocol.keys import LockKeys
from .protocol.scripting import Call
from .runtime.acquiring import Outcome, Request
from .runtime.driver import Command, Eval, EvalWait, Operation, adrive, drive
from .runtime.holds import Hold
from .runtime.ownership import bound_to_caller, current_owner, owner_serial, process_tag
from .runtime.renewal import renewer
from .validation import MAX_TTL_SECONDS, check_bool, check_ttl, to_millis

__all__ = ["DEFAULT_SLICE_SECONDS", "MAX_SLICE_SECONDS", "Lock"]

#: How long the holder that got the lock may take it back while others wait (see
#: ``slice_seconds``).
DEFAULT_SLICE_SECONDS = 0.005
#: Longest accepted slice.
MAX_SLICE_SECONDS = 1.0
_MAX_TTL_MS = to_millis(MAX_TTL_SECONDS)

Replicas = int | Literal["majority"]


class Lock(Primitive[LockKeys]):
    """A mutual-exclusion lock on Redis, shared by every process that uses the same name.

    ``timeout`` is the lock's time to live in seconds (int or float; default: the configured
    default); a holder that crashes frees the lock when it runs out. ``blocking`` and
    ``blocking_timeout`` are the defaults of :meth:`acquire` and of ``with``. With
    ``auto_renew`` the process-wide renewer keeps the TTL topped up while the lock is held.
    ``wait_for_replicas`` (an int, or ``"majority"`` of the replicas connected to the primary)
    makes acquire fail, and undo itself, unless that many replicas acknowledged it.
    ``metadata`` (a JSON-serialisable mapping; key ``"label"`` names the caller) is stored
    with the hold for the admin page. ``on_lost(lock, reason)`` is called when a hold turns
    out to be lost: on the library's callback thread when the renewer finds it, in the
    owner's thread when its own call (``ensure_held()``, ``release()``...) does.
    ``metric_name`` is the bounded name the events (and the exporters built on them) carry to
    aggregate by, where ``name`` has one value per order or user (``"order:{id}"`` for
    ``"order:123"``); the decorator sets its key template.

    Blocked waiters are served in arrival order: a release hands the lock to the first of them.
    ``slice_seconds`` (default 5 ms) lets the thread or task that got the lock take it back,
    again and again, until that long after it got it, even while others wait; its first
    release after that hands the lock on. 0 hands it on at every release.

    One Lock object may be shared by threads, greenlets and asyncio tasks: each has its own
    hold and token, and none can release another's (a hold belongs to whoever *called*
    ``acquire()``/``aacquire()``; see :mod:`.runtime.ownership`). Locks are not re-entrant, but a
    hold whose TTL ran out is no hold: acquiring again then simply takes the lock anew.

    Raises InvalidArgument / InvalidArgumentType (ValueError / TypeError) for bad arguments.
    """

    kind = "lock"

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
        metric_name: str | None = None,
        slice_seconds: float = DEFAULT_SLICE_SECONDS,
    ) -> None:
        super().__init__(
            name,
            timeout=timeout,
            using=using,
            client=client,
            blocking=blocking,
            blocking_timeout=blocking_timeout,
            auto_renew=auto_renew,
            metadata=metadata,
            on_lost=on_lost,
            metric_name=metric_name,
        )
        self._metadata_json = with_renewal(self._metadata_json, self.auto_renew, self.timeout)
        self.wait_for_replicas = _check_replicas(wait_for_replicas)
        self.slice_seconds = _check_slice(slice_seconds)
        self._slice_ms = math.ceil(self.slice_seconds * 1000)

    # -- public API beyond the shared one ----------------------------------------------------
    def extend(self, seconds: float, *, replace: bool = False) -> float:
        """Add ``seconds`` to the remaining TTL, or with ``replace=True`` set it to ``seconds``.

        Returns the new TTL in seconds. Raises LockNotOwned / LockLost like :meth:`release`.
        """
        hold = self._require_hold(current_owner())
        return drive(self._extend(hold, seconds, replace), hold.backend)

    def locked(self) -> bool:
        """Whether anyone holds the lock right now."""
        backend = self.backend
        return drive(self._state(backend, None), backend).held

    def owned(self) -> bool:
        """Whether this thread/greenlet/task holds the lock, as Redis sees it now."""
        hold = self._current_hold(current_owner())
        if hold is None or hold.lost:
            return False
        return drive(self._owned(hold), hold.backend)

    @property
    def fence(self) -> int | None:
        """The fencing number of this thread's/task's hold (None when not held).

        Strictly greater than every fence handed out earlier for this name: pass it along
        with writes and let the resource reject smaller ones.
        """
        hold = self._current_hold(current_owner())
        return None if hold is None else hold.fence

    @bound_to_caller
    async def aextend(self, owner: Any, seconds: float, *, replace: bool = False) -> float:
        """Asyncio twin of :meth:`extend`."""
        hold = self._require_hold(owner or current_owner())
        return await adrive(self._extend(hold, seconds, replace), hold.backend)

    async def alocked(self) -> bool:
        """Asyncio twin of :meth:`locked`."""
        backend = self.backend
        return (await adrive(self._state(backend, None), backend)).held

    @bound_to_caller
    async def aowned(self, owner: Any) -> bool:
        """Asyncio twin of :meth:`owned`."""
        hold = self._current_hold(owner or current_owner())
        if hold is None or hold.lost:
            return False
        return await adrive(self._owned(hold), hold.backend)

    # -- hooks -----------------------------------------------------------------------------
    def _make_keys(self, backend: Backend) -> LockKeys:
        return backend.keys.lock(self.name)

    def _not_acquired(self, outcome: Outcome) -> LockNotAcquired:
        detail = ""
        if outcome.retry_after is not None:
            detail = f"; likely free in {outcome.retry_after:.3f} s"
        return LockNotAcquired(
            f"lock {self.name!r} is held by someone else{detail}",
            retry_after=outcome.retry_after,
        )

    def _release_call(self, keys: LockKeys, token: str, fence: int | None = None) -> Call:
        return protocol.release_call(keys, token, fence=fence)

    def _renew_call(self, hold: Hold) -> Call:
        return protocol.extend_call(
            hold.keys, hold.token, to_millis(hold.ttl), "max", _MAX_TTL_MS, fence=hold.fence
        )

    def _probe(self, hold: Hold) -> Operation[int | None]:
        state = yield from self._state(hold.backend, hold)
        # (The token holding with another fence holds a later grant: not this hold.)
        return state.ttl_ms if state.owned and state.fence == hold.fence else None

    def _owned(self, hold: Hold) -> Operation[bool]:
        if (yield from self._probe(hold)) is None:
            self._lost(hold, "it expired or was taken over")
            return False
        return True

    def _attempt(
        self, request: Request[LockKeys], queue: bool
    ) -> Operation[replies.Acquired | replies.Contended | replies.TooLate | replies.Evicted]:
        """The acquire script, and with wait_for_replicas the WAIT (undone if short)."""
        needed = 0
        if self.wait_for_replicas is not None:
            needed = yield from self._replicas_needed(request.keys)
        deadline_ms = yield from request.deadline()
        call = protocol.acquire_call(
            request.keys,
            request.token,
            to_millis(request.ttl),
            request.metadata,
            queue=queue,
            lease_ms=protocol.WAITER_LEASE_MS,
            session=session_of(request.owner),
            slice_ms=self._slice_ms,
            channel=self._channel(request) if queue else "-",
            deadline_ms=deadline_ms,
            waited_ms=request.waited_ms(),
        )
        if self.wait_for_replicas is None:
            result = protocol.decode_acquire((yield from request.ask(Eval(call))))
            request.answered(result.server_now_ms)
            return result
        timeout_ms = to_millis(request.backend.replica_wait_timeout)
        reply, acked = yield from request.ask(EvalWait(call, needed, timeout_ms))
        result = protocol.decode_acquire(reply)
        request.answered(result.server_now_ms)
        if isinstance(result, replies.Acquired) and acked < needed:
            undo = self._release_call(request.keys, request.token)
            try:
                yield Eval(undo)
            except LockBackendError:
                renewer().reclaim(
                    request.backend, undo, request.lifetime, f"an unreplicated acquire of {self}"
                )
                raise
            raise LockNotReplicated(
                f"lock {self.name!r}: {acked} of {needed} replicas acknowledged within "
                f"{request.backend.replica_wait_timeout} s; the acquire was undone"
            )
        return result

    # -- lock operations (sans I/O) --------------------------------------------------------
    def _replicas_needed(self, keys: LockKeys) -> Operation[int]:
        if self.wait_for_replicas != "majority":
            return int(self.wait_for_replicas or 0)
        role = yield Command(("ROLE",), keys.lock)
        replicas = len(role[2]) if len(role) > 2 else 0
        return replicas // 2 + 1 if replicas else 0

    def _extend(self, hold: Hold, seconds: float, replace: bool) -> Operation[float]:
        ms = to_millis(check_ttl(seconds, "seconds"))
        replace = check_bool(replace, "replace")
        if hold.lost:
            raise self._lost(hold, hold.lost_reason or "")
        started = time.monotonic()
        if replace:
            # A shorter TTL takes effect once the script ran, whether or not its reply comes
            # back: believe it from now on, and the reply (if any) tells the rest. Renewals
            # never shorten a hold: an auto-renewed one is topped up again by its next renewal,
            # which must come before the shorter TTL ends.
            hold.extended(min(hold.expires_at, started + ms / 1000))
            renewer().sooner(hold)
        hold.extends += 1  # numbered, so that a resent extend counts once
        call = protocol.extend_call(
            hold.keys,
            hold.token,
            ms,
            "set" if replace else "add",
            _MAX_TTL_MS,
            seq=hold.extends,
            fence=hold.fence,
        )
        try:
            reply = yield Eval(call)
        except BaseException:
            if replace:
                # No reply: the script may have run after a renewal whose reply raised the
                # belief meanwhile. Believe the shorter TTL again, in a new generation, so
                # that no renewal sent before this point can raise it.
                hold.extended(min(hold.expires_at, started + ms / 1000))
                renewer().sooner(hold)
            raise
        new_ttl_ms = replies.decode_renewal(reply)
        if new_ttl_ms is None:
            raise self._lost(hold, replies.loss_reason(int(reply[0])))
        hold.extended(started + new_ttl_ms / 1000)
        renewer().sooner(hold)
        return new_ttl_ms / 1000

    def _state(self, backend: Backend, hold: Hold | None) -> Operation[protocol.LockState]:
        keys = hold.keys if hold is not None else self._keys_for(backend)
        token = hold.token if hold is not None else None
        return protocol.decode_state((yield Eval(protocol.state_call(keys, token))))


def session_of(owner: object) -> str:
    """Names the asking thread, greenlet or task, for slices: the same for all its acquires,
    and never another's (not its ``id()``: a later owner at the same address would share it,
    and could take over this one's slice; nor its pid: another host's or container's process
    may have the same)."""
    return f"{process_tag()}.{owner_serial(owner):x}"


def _check_slice(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentType(
            "slice_seconds", f"must be a number of seconds, not {type(value).__name__}"
        )
    if not 0 <= value <= MAX_SLICE_SECONDS:  # also refuses NaN
        raise InvalidArgument(
            "slice_seconds", f"must be from 0 to {MAX_SLICE_SECONDS} seconds (got {value!r})"
        )
    return float(value)


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

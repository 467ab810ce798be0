"""The fair counting Semaphore: at most ``limit`` holders at once, admitted in arrival order.

Redis in Action 6.3 (counting and fair semaphores, refresh) done as single Lua scripts in the
manner of 11.2.3, with every timestamp taken from the Redis server's clock, and with a queue
so that blocked waiters are admitted in the order they arrived and woken by releases.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .connection.backend import Backend
from .errors import (
    InvalidArgument,
    InvalidArgumentType,
    LockNotAcquired,
    SemaphoreFull,
    SemaphoreLimitMismatch,
)
from .holding import LostCallback
from .info import HolderInfo, SemaphoreInfo
from .primitive import Primitive
from .protocol import replies
from .protocol import semaphore_calls as protocol
from .protocol.holder import with_renewal
from .protocol.keys import SemaphoreKeys
from .protocol.lock_calls import WAITER_LEASE_MS
from .protocol.scripting import Call
from .registry import semaphore_info_steps
from .runtime.acquiring import Outcome, Request
from .runtime.driver import Eval, Operation, adrive, drive
from .runtime.holds import Hold
from .runtime.ownership import bound_to_caller, current_owner
from .validation import to_millis

__all__ = ["MAX_LIMIT", "Semaphore"]

#: Largest accepted limit.
MAX_LIMIT = 10_000


class Semaphore(Primitive[SemaphoreKeys]):
    """A fair counting semaphore: at most ``limit`` holders of ``name`` at once, fleet-wide.

    ``timeout`` is each holder's time to live in seconds: a holder that crashes frees its
    slot when it runs out (default: the configured default TTL). Blocked waiters queue in
    arrival order and are admitted in that order, woken by releases; a non-blocking acquire
    never overtakes a queued waiter. ``auto_renew`` keeps a holder's TTL topped up from the
    process-wide renewer; ``refresh()`` does it by hand. All times come from the Redis server's
    clock, so a client whose clock is off can neither steal a slot nor lose one.

    Everyone using one name must pass the same ``limit``: while the semaphore has holders or
    waiters, an acquire with another limit raises :class:`SemaphoreLimitMismatch` (and
    changes nothing); once nobody holds or waits, the next acquire sets the limit anew.

    Like :class:`Lock`, one object may be shared by threads, greenlets and asyncio tasks, each
    with a hold of its own; it is not re-entrant, but a slot whose TTL ran out is no slot.
    ``metric_name``: as for :class:`Lock`.

    Raises InvalidArgument / InvalidArgumentType (ValueError / TypeError) for bad arguments.
    """

    kind = "semaphore"
    recheck_seconds = 0.5

    def __init__(
        self,
        name: str,
        limit: int,
        *,
        timeout: float | None = None,
        using: str | None = None,
        client: Any = None,
        blocking: bool = True,
        blocking_timeout: float | None = None,
        auto_renew: bool = False,
        metadata: Mapping[str, Any] | None = None,
        on_lost: LostCallback | None = None,
        metric_name: str | None = None,
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
        self.limit = check_limit(limit)

    # -- public API beyond the shared one ----------------------------------------------------
    def refresh(self) -> float:
        """Give this thread's/task's slot a full TTL again; return it in seconds.

        Raises LockNotOwned if nothing was acquired, LockLost if the slot was lost (expired
        or force-released): a lost slot is never taken back, so the limit holds.
        """
        hold = self._require_hold(current_owner())
        return drive(self._refresh(hold), hold.backend)

    def held(self) -> bool:
        """Whether this thread/greenlet/task holds a slot, as Redis sees it now."""
        hold = self._current_hold(current_owner())
        if hold is None or hold.lost:
            return False
        return drive(self._held(hold), hold.backend)

    def count(self) -> int:
        """How many slots are held right now (holders whose TTL ran out are not counted)."""
        backend = self.backend
        return drive(self._state(backend), backend).count

    def holders(self) -> list[HolderInfo]:
        """The current holders, soonest to expire first, with their metadata."""
        backend = self.backend
        return list(drive(self._info(backend), backend).holders)

    @bound_to_caller
    async def arefresh(self, owner: Any) -> float:
        """Asyncio twin of :meth:`refresh`."""
        hold = self._require_hold(owner or current_owner())
        return await adrive(self._refresh(hold), hold.backend)

    @bound_to_caller
    async def aheld(self, owner: Any) -> bool:
        """Asyncio twin of :meth:`held`."""
        hold = self._current_hold(owner or current_owner())
        if hold is None or hold.lost:
            return False
        return await adrive(self._held(hold), hold.backend)

    async def acount(self) -> int:
        """Asyncio twin of :meth:`count`."""
        backend = self.backend
        return (await adrive(self._state(backend), backend)).count

    async def aholders(self) -> list[HolderInfo]:
        """Asyncio twin of :meth:`holders`."""
        backend = self.backend
        return list((await adrive(self._info(backend), backend)).holders)

    # -- hooks -----------------------------------------------------------------------------
    def _make_keys(self, backend: Backend) -> SemaphoreKeys:
        return backend.keys.semaphore(self.name)

    def _not_acquired(self, outcome: Outcome) -> LockNotAcquired:
        detail = ""
        if outcome.retry_after is not None:
            detail = f"; a slot is likely free in {outcome.retry_after:.3f} s"
        return SemaphoreFull(
            f"semaphore {self.name!r} has all {self.limit} slots taken{detail}",
            retry_after=outcome.retry_after,
        )

    def _release_call(self, keys: SemaphoreKeys, token: str, fence: int | None = None) -> Call:
        return protocol.release_call(keys, token, ticket=fence)

    def _renew_call(self, hold: Hold) -> Call:
        return protocol.refresh_call(hold.keys, hold.token, to_millis(hold.ttl), hold.fence)

    def _probe(self, hold: Hold) -> Operation[int | None]:
        state = yield from self._state(hold.backend, hold)
        # (The token holding with another ticket holds a later admission: not this hold.)
        return state.ttl_ms if state.ticket == hold.fence else None

    def _held(self, hold: Hold) -> Operation[bool]:
        if (yield from self._probe(hold)) is None:
            self._lost(hold, "its slot expired or was removed")
            return False
        return True

    def _attempt(
        self, request: Request[SemaphoreKeys], queue: bool
    ) -> Operation[replies.Acquired | replies.Contended | replies.TooLate | replies.Evicted]:
        deadline_ms = yield from request.deadline()
        call = protocol.acquire_call(
            request.keys,
            request.token,
            self.limit,
            to_millis(request.ttl),
            request.metadata,
            queue=queue,
            lease_ms=WAITER_LEASE_MS,
            channel=self._channel(request) if queue else "-",
            deadline_ms=deadline_ms,
            waited_ms=request.waited_ms(),
        )
        result = protocol.decode_acquire((yield from request.ask(Eval(call))))
        if isinstance(result, protocol.LimitMismatch):
            request.answered(None)
            raise SemaphoreLimitMismatch(
                f"semaphore {self.name!r} is in use with limit {result.stored_limit}, "
                f"not {self.limit}: everyone using one name must pass the same limit",
                stored_limit=result.stored_limit,
                limit=self.limit,
            )
        request.answered(result.server_now_ms)
        return result

    # -- semaphore operations (sans I/O) ---------------------------------------------------
    def _refresh(self, hold: Hold) -> Operation[float]:
        if hold.lost:
            raise self._lost(hold, hold.lost_reason or "")
        started = time.monotonic()
        reply = yield Eval(self._renew_call(hold))
        new_ttl_ms = replies.decode_renewal(reply)
        if new_ttl_ms is None:
            raise self._lost(hold, replies.loss_reason(int(reply[0])))
        hold.extended(started + new_ttl_ms / 1000)
        return new_ttl_ms / 1000

    def _state(
        self, backend: Backend, hold: Hold | None = None
    ) -> Operation[protocol.SemaphoreState]:
        keys = hold.keys if hold is not None else self._keys_for(backend)
        call = protocol.state_call(keys, hold.token if hold is not None else None)
        return protocol.decode_state((yield Eval(call)))

    def _info(self, backend: Backend) -> Operation[SemaphoreInfo]:
        infos = yield from semaphore_info_steps(backend, [self.name])
        return infos[0] or SemaphoreInfo.empty(self.name, self.limit)


def check_limit(value: object) -> int:
    """Return ``value`` if it is a usable semaphore limit: an int from 1 to MAX_LIMIT."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentType("limit", f"must be an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_LIMIT:
        raise InvalidArgument("limit", f"must be from 1 to {MAX_LIMIT} (got {value})")
    return value

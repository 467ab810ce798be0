"""The acquire loop, shared by locks and semaphores, written once as a generator of effects.

One call to ``acquire()`` is one :class:`Request` (a fresh token, the TTL, the holder
metadata). The loop sends the primitive's acquire script; a blocked caller takes a place in
the primitive's queue and waits for its process's wake-up listener to say that a release let
it in (or a re-check interval, so a lost message costs latency, never liveness), then sends
the script again: a release that handed it the hold only *reserved* the hold for a moment,
and this second run, which recognises the token, confirms it for the full TTL. A waiter that
died while queued therefore keeps what it was handed for
:data:`.lock_protocol.HANDOVER_WINDOW_MS` at most, whatever the TTL.

What an interrupted acquire leaves is undone: a cancellation or Ctrl-C releases (or leaves
the queue) at once, and an acquire whose reply never came (a timeout, a cut connection, a
partition) may have run, so its token goes to the renewer, which releases it as soon as Redis
answers again (see :mod:`.renewal`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from . import replies
from .backend import Backend
from .driver import Detach, Eval, Listen, Operation, Wait
from .errors import LockBackendError, LockError
from .holder import holder_id
from .renewal import renewer
from .scripting import Call
from .wakeup import decode_wake

__all__ = [
    "WAITER_LEASE_SECONDS",
    "Acquirer",
    "Keys",
    "Outcome",
    "Request",
    "acquire_steps",
]

logger = logging.getLogger(__name__)

#: How long a blocked waiter keeps its place in a queue without coming back to ask. Waiters
#: ask at least every ``recheck_seconds`` (at most 2 s apart when a slice of up to 1 s
#: delays them); one that crashed or stalled longer than this loses its place (and takes a
#: new one at the back when it asks again). A release may hand the lock to a waiter that died
#: less than this long ago: each such waiter costs the others one hand-over window.
WAITER_LEASE_SECONDS = 3.0
#: Slack added to how long an unknown grant could live when it is given to the renewer.
_RECLAIM_SLACK_SECONDS = 1.0


class Keys(Protocol):
    """What the loop needs of a primitive's keys."""

    @property
    def member(self) -> str:
        """Registry member and wake-up message ("lock:<name>", "sem:<name>")."""


K = TypeVar("K", bound=Keys)


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

    @property
    def lifetime(self) -> float:
        """How long anything this request made in Redis can live (a hold, a queue place)."""
        return max(self.ttl, WAITER_LEASE_SECONDS) + _RECLAIM_SLACK_SECONDS


class Acquirer(Protocol[K]):
    """What the loop needs from a primitive."""

    @property
    def kind(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def recheck_seconds(self) -> float: ...

    def _attempt(
        self, request: Request[K], queue: bool
    ) -> Operation[replies.Acquired | replies.Contended]: ...

    def _release_call(self, keys: K, token: str) -> Call: ...

    def _grant(self, request: Request[K], result: replies.Acquired, started: float) -> None: ...

    def _contended(self, retry_after: float | None) -> None: ...


def acquire_steps(
    primitive: Acquirer[K], request: Request[K], blocking: bool, wait: float | None
) -> Operation[Outcome]:
    """Acquire for ``request``: once, or (``blocking``) waiting up to ``wait`` seconds (None:
    as long as it takes)."""
    deadline = None if wait is None else time.monotonic() + wait
    wake_key = f"{request.keys.member}#{holder_id(request.token)}"
    waiter = None
    attempting = queued = False
    try:
        if blocking and request.backend.hub().ready:
            # The process listens already: register at once, so that a release between
            # the first attempt and the wait cannot slip by, and no second try is needed.
            waiter = yield Listen(wake_key, 1.0)
        while True:
            started = time.monotonic()
            attempting = True
            result = yield from primitive._attempt(request, blocking)
            attempting = False
            if isinstance(result, replies.Acquired):
                primitive._grant(request, result, started)
                return Outcome(True)
            queued = queued or result.position > 0
            holder_left = result.holder_ttl_ms / 1000 if result.holder_ttl_ms >= 0 else None
            remaining = None if deadline is None else deadline - time.monotonic()
            if not blocking or (remaining is not None and remaining <= 0):
                if queued:
                    yield from _leave_queue(primitive, request)
                logger.debug("acquire: %s %r is taken", primitive.kind, primitive.name)
                primitive._contended(holder_left)
                return Outcome(False, holder_left)
            if waiter is None:
                # Register before the next attempt, so no release can slip in between.
                waiter = yield Listen(wake_key, min(remaining or 1.0, 1.0))
                continue
            pause = _pause(primitive.recheck_seconds, holder_left, remaining)
            yield from _wait_turn(waiter, pause, remaining)
    except LockBackendError:
        if attempting:  # the script may have run: undo it as soon as Redis answers again
            _reclaim(primitive, request, "an acquire whose reply never came")
        raise
    except (GeneratorExit, LockError):
        raise
    except BaseException:
        if attempting or queued:
            # Cancelled or interrupted: undo a grant we may never hear of, leave the queue.
            yield Detach(
                primitive._release_call(request.keys, request.token),
                request.lifetime,
                f"an interrupted acquire of {primitive.kind} {primitive.name!r}",
            )
        raise
    finally:
        if waiter is not None:
            waiter.close()


def _pause(recheck: float, holder_left: float | None, remaining: float | None) -> float:
    """How long to wait for a wake-up before trying again: a re-check, no longer than the
    holder's remaining TTL nor the time left to wait."""
    pause = recheck
    if holder_left is not None:
        pause = min(pause, max(holder_left, 0.001))
    if remaining is not None:
        pause = min(pause, remaining)
    return pause


def _wait_turn(waiter: Any, pause: float, remaining: float | None) -> Operation[None]:
    """Wait for a wake-up, at most ``pause`` seconds; then it is time to try again."""
    while True:
        said = yield Wait(waiter, pause)
        if said is None:
            return  # timed out: re-check
        later = decode_wake(said)
        if later is None:
            return  # woken: the hold may be this waiter's (handed over) or free
        # Kept for its holder's slice a little longer: wait that long (or for a hand-over).
        pause = later if remaining is None else min(later, max(remaining, 0.0))


def _leave_queue(primitive: Acquirer[K], request: Request[K]) -> Operation[None]:
    call = primitive._release_call(request.keys, request.token)
    try:
        yield Eval(call)
    except LockBackendError as error:
        logger.warning(
            "acquire: %s %r: leaving the queue failed: %s", primitive.kind, primitive.name, error
        )
        _reclaim(primitive, request, "a place in a queue")


def _reclaim(primitive: Acquirer[K], request: Request[K], what: str) -> None:
    renewer().reclaim(
        request.backend,
        primitive._release_call(request.keys, request.token),
        request.lifetime,
        f"{what} ({primitive.kind} {primitive.name!r})",
    )

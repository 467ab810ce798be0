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
from .lock_protocol import WAITER_LEASE_MS
from .renewal import renewer
from .scripting import Call
from .wake_messages import decode_wake

__all__ = [
    "HANDOVER_TRUST",
    "WAITER_LEASE_SECONDS",
    "Acquirer",
    "Keys",
    "Outcome",
    "Request",
    "acquire_steps",
]

logger = logging.getLogger(__name__)

#: How long a blocked waiter keeps its place in a queue without coming back to ask (see
#: :data:`.lock_protocol.WAITER_LEASE_MS`).
WAITER_LEASE_SECONDS = WAITER_LEASE_MS / 1000
#: A hand-over is trusted without a round trip only while more than this share of its TTL is
#: left by the local estimate (which dates the grant from the server's clock, on the safe
#: side); an older one (the waiter read it late: it was stopped) is checked by confirming it.
HANDOVER_TRUST = 0.5
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


@dataclass(slots=True)
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
    waiter = None
    attempting = queued = False
    # Server clock minus local monotonic clock, from the last refusal: it dates a hand-over.
    # Taken with the local time the request was sent, so a grant is dated no later than it
    # happened (and a hold's end estimated no later than its real end).
    offset: float | None = None
    try:
        if blocking and request.backend.hub().ready:
            # The process listens already: register at once, so that a release between
            # the first attempt and the wait cannot slip by, and no second try is needed.
            waiter = yield Listen(_wake_key(request), 1.0)
        while True:
            started = time.monotonic()
            attempting = True
            result = yield from primitive._attempt(request, blocking)
            attempting = False
            if isinstance(result, replies.Acquired):
                primitive._grant(request, result, started)
                return Outcome(True)
            queued = queued or result.position > 0
            if result.server_now_ms is not None:
                offset = result.server_now_ms / 1000 - started
            holder_left = result.holder_ttl_ms / 1000 if result.holder_ttl_ms >= 0 else None
            remaining = None if deadline is None else deadline - time.monotonic()
            if not blocking or (remaining is not None and remaining <= 0):
                if queued:
                    yield from _leave_queue(primitive, request)
                logger.debug("acquire: %s %r is taken", primitive.kind, primitive.name)
                primitive._contended(result.retry_after)
                return Outcome(False, result.retry_after)
            if waiter is None:
                # Register before the next attempt, so no release can slip in between.
                waiter = yield Listen(_wake_key(request), min(remaining or 1.0, 1.0))
                continue
            pause = _pause(primitive.recheck_seconds, holder_left, remaining)
            handed = yield from _wait_turn(waiter, pause, remaining)
            granted = _trusted(handed, offset)
            if handed is not None and granted is not None:
                # A release made this waiter the holder, for its TTL: no further round trip.
                primitive._grant(request, handed, granted)
                return Outcome(True)
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


def _wake_key(request: Request[Any]) -> str:
    """What a wake-up for this request starts with (see :mod:`.wakeup`)."""
    return f"{request.keys.member}#{holder_id(request.token)}"


def _pause(recheck: float, holder_left: float | None, remaining: float | None) -> float:
    """How long to wait for a wake-up before trying again: a re-check, no longer than the
    holder's remaining TTL nor the time left to wait."""
    pause = recheck
    if holder_left is not None:
        pause = min(pause, max(holder_left, 0.001))
    if remaining is not None:
        pause = min(pause, remaining)
    return pause


def _wait_turn(
    waiter: Any, pause: float, remaining: float | None
) -> Operation[replies.Acquired | None]:
    """Wait for a wake-up, at most ``pause`` seconds. Returns the grant a release handed over
    with the wake-up, or None: time to try again (which also confirms a hold handed over
    for a moment only)."""
    while True:
        said = yield Wait(waiter, pause)
        if said is None:
            return None  # timed out: re-check
        news = decode_wake(said)
        if news is None or isinstance(news, replies.Acquired):
            return news
        # Kept for its holder's slice a little longer: wait that long (or for a hand-over).
        pause = news if remaining is None else min(news, max(remaining, 0.0))


def _trusted(handed: replies.Acquired | None, offset: float | None) -> float | None:
    """The local time a hand-over was granted, if it can be trusted without a round trip.

    Not when the news comes late (the waiter was stopped or starved after the grant) and
    less than HANDOVER_TRUST of the TTL may be left: then the next attempt tells whether the
    hold is still there (and confirms it).
    """
    if handed is None or offset is None:
        return None
    granted = handed.server_now_ms / 1000 - offset
    left = granted + handed.ttl_ms / 1000 - time.monotonic()
    return granted if left > handed.ttl_ms / 1000 * HANDOVER_TRUST else None


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

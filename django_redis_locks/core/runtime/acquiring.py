"""The acquire loop, shared by locks and semaphores, written once as a generator of effects.

One call to ``acquire()`` is one :class:`Request` (a fresh token, the TTL, the holder
metadata). The loop sends the primitive's acquire script; a blocked caller takes a place in
the primitive's queue and waits for its process's wake-up listener to say that a release let
it in (or a re-check interval, so a lost message costs latency, never liveness), then sends
the script again: a release that handed it the hold only *reserved* the hold for a moment,
and this second run, which recognises the token, confirms it for the full TTL. A waiter that
died while queued therefore keeps what it was handed for
:data:`..protocol.lock_calls.HANDOVER_WINDOW_MS` at most, whatever the TTL.

What an interrupted acquire leaves is undone: a cancellation or Ctrl-C releases (or leaves
the queue) at once, and an acquire whose reply never came (a timeout, a cut connection, a
partition) may have run, so its token goes to the renewer, which releases it as soon as Redis
answers again (see :mod:`.renewal`).

Late copies. Each attempt carries a deadline in the server's clock (see :mod:`.deadlines`):
a copy of it that reaches Redis later writes nothing. Before that, a copy can still land
after the caller is done with the token: an attempt that went out more than once (the client
library resent it), or one in flight when the acquire failed or was interrupted. The
:class:`Request` keeps until when (:meth:`Request.landing_until`); the token is then watched
by the renewer until that time (a hold's, when the hold ends: see
:meth:`..primitive.Primitive._forget`), so a copy that lands is undone within a re-check
interval instead of keeping the name, for nobody, for its TTL.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from django_redis_locks.core.connection.backend import Backend
from django_redis_locks.core.errors import LockBackendError, LockError
from django_redis_locks.core.protocol import replies
from django_redis_locks.core.protocol.holder import holder_id, new_token
from django_redis_locks.core.protocol.lock_calls import WAITER_LEASE_MS
from django_redis_locks.core.protocol.scripting import Call
from django_redis_locks.core.protocol.wake_messages import decode_wake

from .deadlines import ServerClock, passed, server_ms
from .driver import Command, Detach, Eval, EvalWait, Listen, Noted, Operation, Wait
from .renewal import renewer

__all__ = [
    "WAITER_LEASE_SECONDS",
    "Acquirer",
    "Keys",
    "Outcome",
    "Request",
    "acquire_steps",
    "lifetime",
]

logger = logging.getLogger(__name__)

#: How long a blocked waiter keeps its place in a queue without coming back to ask (see
#: :data:`..protocol.lock_calls.WAITER_LEASE_MS`).
WAITER_LEASE_SECONDS = WAITER_LEASE_MS / 1000
#: Slack added to how long an unknown grant could live when it is given to the renewer.
_RECLAIM_SLACK_SECONDS = 1.0
#: Answers in a row that say the request came after its deadline before the acquire gives
#: up (LockBackendError): each is asked again at once, with a deadline from the server time
#: the refusal carried.
_LATE_TRIES = 3


def lifetime(ttl: float) -> float:
    """How long anything an acquire with ``ttl`` made in Redis can live (a hold, a queue
    place), with some slack."""
    return max(ttl, WAITER_LEASE_SECONDS) + _RECLAIM_SLACK_SECONDS


class Keys(Protocol):
    """What the loop needs of a primitive's keys."""

    @property
    def member(self) -> str:
        """Registry member and wake-up message ("lock:<name>", "sem:<name>")."""

    @property
    def route(self) -> str:
        """The key that routes the primitive's commands."""


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
    #: The deadline (server ms) of the attempt on its way, until it is answered (0: none).
    deadline_ms: int = 0
    resent: bool = False  # the attempt on its way went out more than once
    #: Until when (monotonic) a copy of an answered attempt may still land (0: none): a
    #: resent one's deadline, as the server's clock passes it.
    copies_until: float = 0.0
    #: When the call began (``time.monotonic()``): what ``waited`` counts from.
    asked_at: float = field(default_factory=time.monotonic)
    #: An attempt was answered (refused): the next one asks after a wait.
    refused: bool = False
    _clock: ServerClock | None = None

    @property
    def lifetime(self) -> float:
        """How long anything this request made in Redis can live (a hold, a queue place)."""
        return lifetime(self.ttl)

    @property
    def clock(self) -> ServerClock:
        """The clock of the server that serves the primitive, as this process knows it."""
        if self._clock is None:
            self._clock = self.backend.server_clock(self.keys.route)
        return self._clock

    def spend_token(self) -> None:
        """The token was evicted (see :class:`..protocol.replies.Evicted`): go on with a
        fresh one, as a new arrival; copies of the spent one's attempts are the caller's to
        watch first."""
        self.token = new_token()
        self.deadline_ms, self.resent, self.copies_until = 0, False, 0.0

    def deadline(self) -> Operation[int]:
        """The deadline (server ms) of an attempt sent now (see :mod:`.deadlines`), noted as
        the attempt on its way. Once per process and server, before its first attempt, it
        asks the server's time (later replies carry it)."""
        if not self.clock.known:
            reply = yield Command(("TIME",), self.keys.route)
            self.clock.learn(server_ms(reply), time.monotonic())
        self.deadline_ms = self.clock.deadline_ms(time.monotonic(), self.backend.request_window)
        self.resent = False
        return self.deadline_ms

    def waited_ms(self) -> int:
        """How long the call has waited so far (ms; 0 before its first refusal): the scripts
        count it in the name's contention figures when the attempt ends the wait."""
        if not self.refused:
            return 0
        return max(round((time.monotonic() - self.asked_at) * 1000), 1)

    def ask(self, effect: Eval | EvalWait) -> Operation[Any]:
        """Send the attempt (the script :meth:`deadline` was asked for); its result."""
        sent = yield Noted(effect)
        self.resent = sent.resent
        return sent.value

    def answered(self, server_now_ms: int | None) -> None:
        """The attempt on its way was answered, at ``server_now_ms`` (None: the reply did not
        say): learn the server's clock; if it went out more than once, another copy may land
        until its deadline."""
        received = time.monotonic()
        if server_now_ms is not None:
            self.clock.learn(server_now_ms, received)
        if self.resent and self.deadline_ms:
            if server_now_ms is not None:
                until = passed(received, self.deadline_ms - server_now_ms)
            else:
                until = self.clock.passed(self.deadline_ms)
            self.copies_until = max(self.copies_until, until)
        self.deadline_ms, self.resent = 0, False

    def landing_until(self) -> float:
        """Until when (monotonic) a copy of an attempt may still land: an unanswered one's
        deadline (by the server's clock as last seen), or an answered one's that went out
        more than once; 0: none."""
        until = self.copies_until
        if self.deadline_ms and self.clock.known:
            until = max(until, self.clock.passed(self.deadline_ms))
        return until


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
    ) -> Operation[replies.Acquired | replies.Contended | replies.TooLate | replies.Evicted]: ...

    def _release_call(self, keys: K, token: str, fence: int | None = None) -> Call: ...

    def _grant(self, request: Request[K], result: replies.Acquired, started: float) -> None: ...

    def _contended(
        self, request: Request[K], retry_after: float | None, blocking: bool
    ) -> None: ...

    def _abandoned(self, request: Request[K], event: Literal["cancelled", "failed"]) -> None: ...


def acquire_steps(
    primitive: Acquirer[K], request: Request[K], blocking: bool, wait: float | None
) -> Operation[Outcome]:
    """Acquire for ``request``: once, or (``blocking``) waiting up to ``wait`` seconds (None:
    as long as it takes)."""
    deadline = None if wait is None else time.monotonic() + wait
    waiter = None
    attempting = queued = False
    # (the last attempt's reply)
    result: replies.Acquired | replies.Contended | replies.Evicted | None = None
    try:
        if blocking and request.backend.hub().ready:
            # The process listens already: register at once, so that a release between
            # the first attempt and the wait cannot slip by, and no second try is needed.
            waiter = yield Listen(_wake_key(request), 1.0)
        while True:
            attempting = True
            started, result = yield from _attempt_in_time(primitive, request, blocking)
            attempting = False
            if isinstance(result, replies.Evicted):
                _start_anew(primitive, request, waiter)
                waiter, queued = None, False
                continue
            if isinstance(result, replies.Acquired):
                if waiter is not None:
                    # Stop listening before the grant is recorded: an interruption while
                    # closing then undoes the grant like one anywhere else (below).
                    closing, waiter = waiter, None
                    closing.close()
                primitive._grant(request, result, started)
                return Outcome(True)
            queued = queued or result.position > 0
            request.refused = True
            holder_left = result.holder_ttl_ms / 1000 if result.holder_ttl_ms >= 0 else None
            remaining = None if deadline is None else deadline - time.monotonic()
            if not blocking or (remaining is not None and remaining <= 0):
                return (yield from _refused(primitive, request, queued, result, blocking))
            if waiter is None:
                # Register before the next attempt, so no release can slip in between.
                waiter = yield Listen(_wake_key(request), min(remaining or 1.0, 1.0))
                continue
            pause = _pause(primitive.recheck_seconds, holder_left, remaining)
            # Woken or not, try again: a hand-over is the name kept for this waiter for a
            # moment, and only the next attempt's reply makes it (and tells it of) a hold.
            yield from _wait_turn(waiter, pause, remaining)
    except LockBackendError:
        # If the script may have run, undo it as soon as Redis answers again, and until no
        # copy of it can land any more; else watch for copies of earlier attempts, if any.
        _abandon(primitive, request, "failed", "an acquire whose reply never came", attempting)
        raise
    except GeneratorExit:
        raise
    except LockError:  # (LockNotReplicated, SemaphoreLimitMismatch)
        _abandon(primitive, request, "failed", "copies of a failed acquire", False)
        raise
    except BaseException:
        if attempting or queued or isinstance(result, replies.Acquired):
            # Cancelled or interrupted: undo a grant we may never hear of (or one granted but
            # interrupted while being recorded, which _grant un-records), leave the queue.
            yield Detach(
                primitive._release_call(request.keys, request.token),
                request.lifetime,
                f"an interrupted acquire of {primitive.kind} {primitive.name!r}",
            )
        # The attempt it interrupted may still land (it went out on another connection).
        _abandon(primitive, request, "cancelled", "copies of an interrupted acquire", False)
        raise
    finally:
        if waiter is not None:
            waiter.close()


def _attempt_in_time(
    primitive: Acquirer[K], request: Request[K], queue: bool
) -> Operation[tuple[float, replies.Acquired | replies.Contended | replies.Evicted]]:
    """One attempt; one that reached Redis after its deadline wrote nothing (an earlier copy
    may have) and is asked again at once, with a deadline from the server time its answer
    carried and the same token, up to _LATE_TRIES times in all. Returns the reply and the
    local time its request was sent (no later than the script that answered: a grant's TTL,
    or the TTL left of one granted before, runs from that script's TIME)."""
    for _ in range(_LATE_TRIES):
        started = time.monotonic()
        result = yield from primitive._attempt(request, queue)
        if not isinstance(result, replies.TooLate):
            return started, result
    raise LockBackendError(
        f"{primitive.kind} {primitive.name!r}: the acquire reached Redis after its deadline "
        f"{_LATE_TRIES} times in a row (each valid {request.backend.request_window:g} s)"
    )


def _refused(
    primitive: Acquirer[K],
    request: Request[K],
    queued: bool,
    result: replies.Contended,
    blocking: bool,
) -> Operation[Outcome]:
    """The acquire ends without the name: leave the queue, watch for late copies."""
    if queued:
        yield from _leave_queue(primitive, request)
    logger.debug("acquire: %s %r is taken", primitive.kind, primitive.name)
    _watch(primitive, request, "copies of a refused acquire", now=False)
    primitive._contended(request, result.retry_after, blocking)
    return Outcome(False, result.retry_after)


def _start_anew(primitive: Acquirer[K], request: Request[K], waiter: Any) -> None:
    """An operator force-released what the request's token was granted (a hand-over not
    confirmed yet, a grant whose reply was lost) before the acquire learned of it: nothing
    is held and the token is spent (:class:`..protocol.replies.Evicted`). Go on with a fresh
    token, as a new arrival (a place in the queue went with the eviction); the listener for
    the spent token's wake-ups is closed."""
    logger.info(
        "acquire: %s %r: its grant was force-released before it was confirmed; asking "
        "again as a new arrival",
        primitive.kind,
        primitive.name,
    )
    _watch(primitive, request, "copies of an evicted acquire", now=False)
    request.spend_token()
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


def _wait_turn(waiter: Any, pause: float, remaining: float | None) -> Operation[None]:
    """Wait for a wake-up, at most ``pause`` seconds; then it is time to try again (which
    confirms a hold handed over for a moment)."""
    while True:
        said = yield Wait(waiter, pause)
        if said is None:
            return  # timed out: re-check
        wait = decode_wake(said)
        if wait is None:
            return
        # Kept for its holder's slice a little longer: wait that long (or for a hand-over).
        pause = wait if remaining is None else min(wait, max(remaining, 0.0))


def _leave_queue(primitive: Acquirer[K], request: Request[K]) -> Operation[None]:
    call = primitive._release_call(request.keys, request.token)
    try:
        yield Eval(call)
    except LockBackendError as error:
        logger.warning(
            "acquire: %s %r: leaving the queue failed: %s", primitive.kind, primitive.name, error
        )
        _watch(primitive, request, "a place in a queue", now=True)


def _abandon(
    primitive: Acquirer[K],
    request: Request[K],
    event: Literal["cancelled", "failed"],
    what: str,
    now: bool,
) -> None:
    """The call ends without a hold: watch for ``what`` (see _watch), and say so (an event)."""
    _watch(primitive, request, what, now=now)
    primitive._abandoned(request, event)


def _watch(primitive: Acquirer[K], request: Request[K], what: str, *, now: bool) -> None:
    """Hand the token's release to the renewer until no copy of the request's attempts can
    land any more (:meth:`Request.landing_until`): sent at once (``now``: something may be
    there already) or after a re-check interval; nothing to do if no copy can land."""
    until = request.landing_until()
    if now or until > time.monotonic():
        renewer().watch(
            request.backend,
            primitive._release_call(request.keys, request.token),
            until,
            request.lifetime,
            f"{what} ({primitive.kind} {primitive.name!r})",
            now=now,
        )

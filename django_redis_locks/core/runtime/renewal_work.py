"""The renewer's work, without its threads: auto-renewed holds (:class:`Renewal`) and tokens
to undo (:class:`Reclaim`), when each is due next, and what each reply means for it.

The lanes of :mod:`.renewal` send the work; the simulation (tests/simulation) applies the very
same functions to its replies, so what a reply does is defined here once. A reply that is not
one the script sends (a connection that handed over another call's reply) counts as no reply:
the outcome is unknown, logged, and looked at again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django_redis_locks.core.protocol import replies
from django_redis_locks.core.protocol.scripting import Call

from .holds import Hold

__all__ = [
    "RETRY_SECONDS",
    "Reclaim",
    "Renewal",
    "UnreadableReply",
    "next_renewal",
    "reclaim_replied",
    "renewal_replied",
]

logger = logging.getLogger("django_redis_locks.core.runtime.renewal")

#: A renewal that failed is retried after this long (or a tenth of the TTL, if shorter).
RETRY_SECONDS = 0.25
#: A reclaim that could not reach Redis is retried after this long, doubling up to 1 s.
_RECLAIM_RETRY_SECONDS = 0.05
#: After a reclaim reached Redis, it looks again after this long, doubling, while the
#: unknown grant could still appear (a request stuck in a dead connection).
_RECLAIM_RECHECK_SECONDS = 0.5


@dataclass(eq=False)
class Renewal:
    """An auto-renewed hold as its lane sees it."""

    hold: Hold
    call: Call  # tops the hold up to its full TTL: a {1, ttl_ms, now_ms} / {0} / {-1} reply
    label: str  # "lock 'name'", for messages
    stop_reason: Callable[[], str | None]  # why renewing should stop (owner ended...), or None
    due: float = 0.0


@dataclass(eq=False)
class Reclaim:
    """A token-checked release whose outcome is unknown, sent until it is settled."""

    backend: Any  # kept alive until the reclaim is done
    call: Call  # a token-checked release (which also leaves a queue)
    until: float  # (monotonic) what it undoes may appear until then: a look sent later settles
    what: str
    due: float
    interval: float = _RECLAIM_RETRY_SECONDS
    reached: bool = False  # Redis answered at least once
    gives_up: float = 0.0  # past this nothing it undoes can be alive: stop, answered or not
    watch: bool = False  # an undo before ``until`` does not settle it: another copy may land

    def __post_init__(self) -> None:
        self.gives_up = max(self.gives_up, self.until)

    @classmethod
    def new(cls, backend: Any, call: Call, lifetime: float, what: str) -> Reclaim:
        """A reclaim due now, for what could live ``lifetime`` seconds."""
        now = time.monotonic()
        return cls(backend, call, now + lifetime, what, due=now)

    @classmethod
    def watching(
        cls, backend: Any, call: Call, until: float, lifetime: float, what: str, *, now: bool
    ) -> Reclaim:
        """A watch: ``call`` sent until ``until`` (the local time by which no copy of a request
        can land any more), at growing intervals, the last time at ``until``; due at once
        (``now``: what it undoes may be there already) or after a re-check interval (the
        token was just released). What a copy makes lives at most ``lifetime`` seconds: while
        Redis cannot be reached it tries until ``until + lifetime``."""
        started = time.monotonic()
        until = max(until, started)
        due = started if now else min(started + _RECLAIM_RECHECK_SECONDS, until)
        return cls(
            backend,
            call,
            until,
            what,
            due=due,
            interval=_RECLAIM_RETRY_SECONDS if now else _RECLAIM_RECHECK_SECONDS,
            reached=not now,
            gives_up=until + lifetime,
            watch=True,
        )


def next_renewal(hold: Hold, now: float) -> float:
    """When to renew ``hold`` next: a third of its TTL from ``now``, or a third of what it has
    left if that is less (an extend shortened it), so that the renewal comes before its end."""
    return now + min(hold.ttl, max(0.0, hold.expires_at - now)) / 3


def renewal_replied(
    renewal: Renewal,
    generation: int,
    result: Any,
    sent_at: float,
    lost: Callable[[Renewal, str, int], None],
    *,
    failed: Callable[[Renewal, str], None] | None = None,
) -> str:
    """Apply a renewal's reply (an exception: none came) to its hold: schedule the next
    renewal, or report the hold lost through ``lost``; a renewal that got no reply and is
    retried is told to ``failed``. Returns what came of it."""
    hold = renewal.hold
    new_ttl_ms: int | None = None
    if not isinstance(result, Exception):
        try:
            code, new_ttl_ms = replies.read_renewal(result)
        except Exception as exc:  # not a renewal's reply: its outcome is unknown
            result = _unreadable(f"renew: {renewal.label}", result, exc)
    if isinstance(result, Exception):
        if hold.local_time_left() <= 0:
            lost(renewal, f"could not be renewed before it expired ({result})", generation)
            return "lost (no reply before expiry)"
        renewal.due = time.monotonic() + min(RETRY_SECONDS, hold.ttl / 10)
        if failed is not None:
            failed(renewal, str(result))
        return "no reply, retry"
    if new_ttl_ms is None:
        lost(renewal, replies.loss_reason(code), generation)
        return f"lost ({code})"
    hold.renewed_until(sent_at + new_ttl_ms / 1000, generation)
    # (Not applied if the owner extended the hold meanwhile: then what it believes now counts.)
    renewal.due = next_renewal(hold, sent_at)
    return f"renewed {new_ttl_ms} ms"


def reclaim_replied(item: Reclaim, result: Any, sent_at: float | None = None) -> bool:
    """Apply a reclaim's reply (an exception: none came) to a look sent at ``sent_at``
    (None: now); True when it is settled."""
    now = time.monotonic()
    sent_at = now if sent_at is None else sent_at
    if not isinstance(result, Exception):
        try:
            result = replies.read_release(result)
        except Exception as exc:  # not a release's reply: its outcome is unknown
            result = _unreadable(f"reclaim: {item.what}", result, exc)
    if isinstance(result, Exception):
        if now >= item.gives_up:
            logger.warning(
                "reclaim: gave up on %s: Redis was out of reach for as long as it could "
                "be alive (%s)",
                item.what,
                result,
            )
            return True
        if not item.reached:  # back off while Redis is away
            item.interval = min(item.interval * 2, 1.0)
    elif int(result) in replies.UNDONE and not (item.watch and sent_at < item.until):
        logger.info("reclaim: undid %s", item.what)
        return True
    elif sent_at >= item.until:
        return True  # looked at when nothing could appear any more: done
    else:
        if int(result) in replies.UNDONE:  # (a watch: another copy may still land)
            logger.info("reclaim: undid %s; watching on", item.what)
        if not item.reached:
            # Nothing there (yet): look again while a late request could still create it.
            item.reached = True
            item.interval = _RECLAIM_RECHECK_SECONDS
        else:
            item.interval *= 2
    # The last look comes at the end of the lifetime, not an interval before it: a
    # request landing in the lifetime's second half is undone too.
    item.due = min(now + item.interval, item.until) if now < item.until else now + item.interval
    return False


class UnreadableReply(Exception):
    """A reply that is not one the script sends (the client library handed over another
    call's): treated like no reply, an unknown outcome."""


def _unreadable(what: str, reply: Any, exc: Exception) -> UnreadableReply:
    shown = repr(reply)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    logger.warning("%s: a reply the script does not send (%s); its outcome is unknown", what, shown)
    error = UnreadableReply(f"unreadable reply {shown}: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error

"""Decoded script replies shared by locks and semaphores. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EVICTED",
    "FORCED",
    "LEFT_QUEUE",
    "NOT_HELD",
    "OTHER_HOLDER",
    "RELEASED",
    "RELEASED_BEFORE",
    "RELEASE_CODES",
    "RENEWAL_CODES",
    "TOO_LATE",
    "UNDONE",
    "Acquired",
    "Contended",
    "Evicted",
    "TooLate",
    "decode_refusal",
    "decode_renewal",
    "loss_reason",
    "read_release",
    "read_renewal",
    "text",
]

# Release codes of the lock and semaphore release scripts (renewals use the first three).
RELEASED = 1  # released now (a forced release: evicted now)
NOT_HELD = 0  # no live hold of that token: it expired (or was never granted)
OTHER_HOLDER = -1  # it expired and someone else holds the name now
LEFT_QUEUE = 2  # the token was not holding but waiting: it left the queue
RELEASED_BEFORE = 3  # that very release (or forced release) already happened: a resend
FORCED = -2  # the token's hold was force-released by an operator
#: Codes that mean a release of the token took effect, now or before.
UNDONE = frozenset((RELEASED, LEFT_QUEUE, RELEASED_BEFORE))
#: The codes of a renewal's (extend's, refresh's) reply: ``{1, new_ttl_ms, now_ms}``, else
#: ``{code}``.
RENEWAL_CODES = frozenset((RELEASED, NOT_HELD, OTHER_HOLDER, FORCED))
#: The codes of a token-checked release's reply.
RELEASE_CODES = frozenset((*RENEWAL_CODES, LEFT_QUEUE, RELEASED_BEFORE))
#: First value of an acquire script's reply ``{TOO_LATE, now_ms}``: the request reached Redis
#: after its deadline and wrote nothing (see :mod:`..runtime.deadlines`).
TOO_LATE = -3
#: First value of an acquire script's reply ``{EVICTED, now_ms}``: the token's hold was
#: force-released (an operator evicted it before its caller learned of it, or the request is
#: a late copy of the evicted holder's acquire); nothing granted, the token is spent.
EVICTED = -4


def text(value: Any) -> str:
    """A reply value as str (replies are bytes unless the client decodes them)."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class Acquired:
    """A grant: the fence (lock) or ticket (semaphore), the TTL set, the server's clock."""

    fence: int
    ttl_ms: int
    server_now_ms: int
    retried: bool  # the token already held it: an earlier attempt's reply was lost


@dataclass(frozen=True, slots=True)
class Contended:
    """No grant. ``holder_ttl_ms``: until the (first) holder expires (-1: no expiry known);
    ``estimate_ms``: until the name is likely free (at most ``holder_ttl_ms``), from the
    lengths of recent holds."""

    holder_ttl_ms: int
    position: int = 0  # 1-based place in the queue (0: not queued)
    server_now_ms: int | None = None
    estimate_ms: int = -1

    @property
    def retry_after(self) -> float | None:
        """Seconds worth waiting before trying again (None: unknown)."""
        ms = self.estimate_ms if self.estimate_ms >= 0 else self.holder_ttl_ms
        return ms / 1000 if ms >= 0 else None


@dataclass(frozen=True, slots=True)
class TooLate:
    """No grant, nothing written: the request reached Redis after its deadline (server time
    ``server_now_ms``); an earlier copy of it may have granted, so the caller asks again."""

    server_now_ms: int


@dataclass(frozen=True, slots=True)
class Evicted:
    """No grant: the token's hold was force-released (server time ``server_now_ms``). The
    token is spent; a caller still acquiring asks again with a fresh one."""

    server_now_ms: int


def decode_refusal(reply: Sequence[Any]) -> TooLate | Evicted | None:
    """The reply of an acquire that came too late or with an evicted token, or None for any
    other reply."""
    code = int(reply[0])
    if code == TOO_LATE:
        return TooLate(server_now_ms=int(reply[1]))
    if code == EVICTED:
        return Evicted(server_now_ms=int(reply[1]))
    return None


def decode_acquired(reply: Sequence[Any]) -> Acquired:
    return Acquired(
        fence=int(text(reply[1])),
        ttl_ms=int(reply[2]),
        server_now_ms=int(reply[3]),
        retried=int(reply[4]) == 1,
    )


def decode_renewal(reply: Sequence[Any]) -> int | None:
    """A ``{1, new_ttl_ms, now_ms}`` / ``{0}`` / ``{-1}`` reply: the new TTL in ms, or None."""
    return int(reply[1]) if int(reply[0]) == 1 else None


def read_renewal(reply: Any) -> tuple[int, int | None]:
    """A renewal's reply, checked strictly, as (code, new TTL in ms or None); ValueError if
    it is not one the scripts send (a connection that handed over another call's reply)."""
    if not isinstance(reply, list | tuple) or not reply:
        raise ValueError("not an array")
    code = int(reply[0])
    if code not in RENEWAL_CODES or len(reply) != (3 if code == RELEASED else 1):
        raise ValueError("not a renewal's reply")
    new_ttl_ms = decode_renewal(reply)
    if new_ttl_ms is not None and new_ttl_ms <= 0:
        raise ValueError("not a TTL")
    return code, new_ttl_ms


def read_release(reply: Any) -> int:
    """A token-checked release's reply, checked strictly, as its code; ValueError (or
    TypeError) if it is not one the scripts send."""
    if isinstance(reply, bool) or not isinstance(reply, int | bytes | str):
        raise TypeError(f"not an integer: {type(reply).__name__}")
    code = int(reply)
    if code not in RELEASE_CODES:
        raise ValueError("not a release's reply")
    return code


def loss_reason(code: int) -> str:
    """Why a hold is gone, from a release or renewal code."""
    if code == OTHER_HOLDER:
        return "it expired and another holder took it"
    if code == FORCED:
        return "it was force-released"
    return "it expired or was removed"

"""The Python side of each lock script: build the call, decode the reply. Pure, no I/O.

Sync and async code paths share these functions, so they cannot drift apart.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .keys import RETENTION_MS, LockKeys
from .replies import Acquired, Contended, decode_acquired, text
from .scripting import Call, load

#: How long a blocked waiter keeps its place in a queue without coming back to ask (ms).
#: Waiters ask at least every ``recheck_seconds`` (at most 2 s apart when a slice of up to
#: 1 s delays them); one that crashed or stalled longer than this loses its place (and takes a
#: new one at the back when it asks again).
WAITER_LEASE_MS = 3000
#: A waiter whose lease has more than this left asked within the last 1.5 s: a hand-over to
#: it is for its full TTL if its process hears the message, and it needs no round trip.
FRESH_LEASE_MS = 1500
#: How long a release hands the lock (or a slot) to a waiter not known to be alive, before
#: that waiter confirms it (ms): a waiter that died while queued keeps nothing longer.
HANDOVER_WINDOW_MS = 1000

__all__ = [
    "LockState",
    "acquire_call",
    "decode_acquire",
    "decode_state",
    "extend_call",
    "release_call",
    "state_call",
]


@dataclass(frozen=True, slots=True)
class LockState:
    held: bool
    owned: bool
    ttl_ms: int | None
    fence: int | None


def acquire_call(
    keys: LockKeys,
    token: str,
    ttl_ms: int,
    metadata: str,
    *,
    queue: bool = False,
    lease_ms: int = 0,
    handoff: bool = True,
    session: str = "-",
    slice_ms: int = 0,
    channel: str = "-",
) -> Call:
    """Take the lock; with ``queue`` a caller that does not get it takes a place in the queue,
    held for ``lease_ms``, and (with ``handoff``) a release may hand the lock straight to it.
    ``session`` (no spaces) names the asking thread or task for slices of ``slice_ms``;
    ``channel`` is the asking process's wake-up channel."""
    return Call(
        load("lock_acquire"),
        keys.all,
        (
            token,
            ttl_ms,
            metadata,
            keys.member,
            RETENTION_MS,
            "queue" if queue else "try",
            lease_ms,
            "1" if handoff else "0",
            session,
            slice_ms,
            channel,
            HANDOVER_WINDOW_MS,
            FRESH_LEASE_MS,
        ),
    )


def decode_acquire(reply: Sequence[Any]) -> Acquired | Contended:
    if int(reply[0]) == 1:
        return decode_acquired(reply)
    return Contended(
        holder_ttl_ms=int(reply[1]),
        position=int(reply[2]),
        server_now_ms=int(reply[3]),
        estimate_ms=int(reply[4]),
    )


def release_call(keys: LockKeys, token: str, *, forced: bool = False) -> Call:
    """Release by the holder's ``token`` (a waiter's token: leave the queue); with ``forced``
    the token is a holder id, and the call gets an id of its own, recognised if resent."""
    return Call(
        load("lock_release"),
        keys.all,
        (
            token,
            keys.member,
            RETENTION_MS,
            "holder" if forced else "token",
            HANDOVER_WINDOW_MS,
            secrets.token_hex(4) if forced else "-",
            FRESH_LEASE_MS,
        ),
    )


def extend_call(
    keys: LockKeys, token: str, ms: int, mode: str, cap_ms: int, *, seq: int = 0
) -> Call:
    """``mode``: "add" (remaining + ms), "set" (exactly ms) or "max" (at least ms). ``seq``
    numbers the hold's extends (1, 2, ...) so that a resent one counts once; 0 for renewals."""
    return Call(
        load("lock_extend"),
        (keys.lock, keys.registry.names, keys.registry.expiry),
        (token, ms, mode, keys.member, cap_ms, RETENTION_MS, seq),
    )


def state_call(keys: LockKeys, token: str | None) -> Call:
    return Call(load("lock_state"), (keys.lock,), (token or "",))


def decode_state(reply: Sequence[Any]) -> LockState:
    if int(reply[0]) == 0:
        return LockState(held=False, owned=False, ttl_ms=None, fence=None)
    return LockState(
        held=True, owned=int(reply[1]) == 1, ttl_ms=int(reply[2]), fence=int(text(reply[3]))
    )

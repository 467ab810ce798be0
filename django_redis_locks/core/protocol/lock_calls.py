"""The Python side of each lock script: build the call, decode the reply. Pure, no I/O.

Sync and async code paths share these functions, so they cannot drift apart.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .constants import HANDOVER_WINDOW_MS, WAITER_LEASE_MS
from .keys import LockKeys
from .replies import Acquired, Contended, Evicted, TooLate, decode_acquired, decode_refusal, text
from .scripting import Call, load

__all__ = [
    "HANDOVER_WINDOW_MS",
    "WAITER_LEASE_MS",
    "LockState",
    "acquire_call",
    "decode_acquire",
    "decode_state",
    "extend_call",
    "release_call",
    "state_call",
    "take_over_call",
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
    session: str = "-",
    slice_ms: int = 0,
    channel: str = "-",
    deadline_ms: int = 0,
    waited_ms: int = 0,
) -> Call:
    """Take the lock; with ``queue`` a caller that does not get it takes a place in the queue,
    held for ``lease_ms``; a release then hands it the lock for a moment, which its next
    attempt confirms.
    ``session`` (no spaces) names the asking thread or task for slices of ``slice_ms``;
    ``channel`` is the asking process's wake-up channel. ``deadline_ms`` (server time) is
    when the request stops being valid: a copy that reaches Redis later writes nothing (see
    :mod:`..runtime.deadlines`); 0 for none (the library always sends one). ``waited_ms``:
    how long the caller has waited so far (0 on its first try), which the name's contention
    figures count when this attempt ends the wait."""
    return Call(
        load("lock_acquire"),
        keys.all,
        (
            token,
            ttl_ms,
            metadata,
            "queue" if queue else "try",
            lease_ms,
            session,
            slice_ms,
            channel,
            deadline_ms,
            waited_ms,
        ),
    )


def decode_acquire(reply: Sequence[Any]) -> Acquired | Contended | TooLate | Evicted:
    if int(reply[0]) == 1:
        return decode_acquired(reply)
    late = decode_refusal(reply)
    if late is not None:
        return late
    return Contended(
        holder_ttl_ms=int(reply[1]),
        position=int(reply[2]),
        server_now_ms=int(reply[3]),
        estimate_ms=int(reply[4]),
    )


def release_call(
    keys: LockKeys, token: str, *, forced: bool = False, fence: int | None = None
) -> Call:
    """Release by the holder's ``token`` (a waiter's token: leave the queue); with ``forced``
    the token is a holder id, and the call gets an id of its own, recognised if resent.
    ``fence``: the holder's hold (None: whatever the token holds), so that a later grant of
    the token is told apart."""
    return Call(
        load("lock_release"),
        keys.all,
        (
            token,
            "holder" if forced else "token",
            secrets.token_hex(4) if forced else "-",
            "" if fence is None else str(fence),
        ),
    )


def extend_call(
    keys: LockKeys,
    token: str,
    ms: int,
    mode: str,
    cap_ms: int,
    *,
    seq: int = 0,
    fence: int | None = None,
) -> Call:
    """``mode``: "add" (remaining + ms), "set" (exactly ms) or "max" (at least ms). ``seq``
    numbers the hold's extends (1, 2, ...) so that a resent one counts once; 0 for renewals.
    ``fence``: the hold's (None: not checked), so that a later grant of the same token (a
    late copy of its acquire) is not taken for it."""
    return Call(
        load("lock_extend"),
        (keys.lock, keys.registry.names, keys.registry.expiry),
        (token, ms, mode, cap_ms, seq, "" if fence is None else str(fence)),
    )


def take_over_call(
    keys: LockKeys,
    token: str,
    fence: int,
    *,
    new_token: str,
    ttl_ms: int,
    metadata: str,
    session: str,
) -> Call:
    """Give the live hold of ``token`` (with ``fence``) to ``new_token`` for ``ttl_ms``, with
    a new fence; the reply is an acquire's grant (``decode_acquired``) or ``{0}`` / ``{-2}``
    (gone / force-released)."""
    return Call(
        load("lock_take_over"),
        (keys.lock, keys.registry.names, keys.registry.expiry),
        (token, str(fence), new_token, ttl_ms, metadata, session),
    )


def state_call(keys: LockKeys, token: str | None) -> Call:
    return Call(load("lock_state"), (keys.lock,), (token or "",))


def decode_state(reply: Sequence[Any]) -> LockState:
    if int(reply[0]) == 0:
        return LockState(held=False, owned=False, ttl_ms=None, fence=None)
    return LockState(
        held=True, owned=int(reply[1]) == 1, ttl_ms=int(reply[2]), fence=int(text(reply[3]))
    )

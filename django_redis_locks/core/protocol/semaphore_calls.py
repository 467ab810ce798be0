"""The Python side of each semaphore script: build the call, decode the reply. Pure, no I/O."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .keys import SemaphoreKeys
from .replies import (
    Acquired,
    Contended,
    Evicted,
    TooLate,
    decode_acquired,
    decode_refusal,
    text,
)
from .scripting import Call, load

__all__ = [
    "LimitMismatch",
    "SemaphoreState",
    "acquire_call",
    "decode_acquire",
    "decode_state",
    "refresh_call",
    "release_call",
    "state_call",
]


@dataclass(frozen=True, slots=True)
class LimitMismatch:
    """The semaphore is in use with another limit."""

    stored_limit: int


@dataclass(frozen=True, slots=True)
class SemaphoreState:
    count: int
    limit: int | None  # None when nobody holds or waits
    waiting: int
    ttl_ms: int | None  # the asking token's remaining life; None if it holds no slot
    ticket: int | None = None  # the ticket of the asking token's slot; None if it holds none


def _all(keys: SemaphoreKeys) -> tuple[str, ...]:
    return (*keys.state, keys.registry.names, keys.registry.expiry, keys.registry.hot)


def acquire_call(
    keys: SemaphoreKeys,
    token: str,
    limit: int,
    ttl_ms: int,
    metadata: str,
    *,
    queue: bool,
    lease_ms: int,
    channel: str = "-",
    deadline_ms: int = 0,
    waited_ms: int = 0,
) -> Call:
    """Take a slot; with ``queue`` a caller that is not admitted takes a place in the queue,
    and ``channel`` (the asking process's wake-up channel) is where it will be told.
    ``deadline_ms`` (server time) is when the request stops being valid: a copy that reaches
    Redis later writes nothing (see :mod:`..runtime.deadlines`); 0 for none (the library
    always sends one). ``waited_ms``: how long the caller has waited so far (0 on its first
    try), which the name's contention figures count when this attempt ends the wait."""
    return Call(
        load("sem_acquire"),
        _all(keys),
        (
            token,
            limit,
            ttl_ms,
            metadata,
            "queue" if queue else "try",
            lease_ms,
            channel,
            deadline_ms,
            waited_ms,
        ),
    )


def decode_acquire(
    reply: Sequence[Any],
) -> Acquired | Contended | LimitMismatch | TooLate | Evicted:
    code = int(reply[0])
    if code == 1:
        return decode_acquired(reply)
    late = decode_refusal(reply)
    if late is not None:
        return late
    if code == 0:
        return Contended(
            holder_ttl_ms=int(reply[1]),
            position=int(reply[2]),
            server_now_ms=int(reply[3]),
            estimate_ms=int(reply[4]),
        )
    return LimitMismatch(stored_limit=int(reply[1]))


def release_call(
    keys: SemaphoreKeys, token: str, *, forced: bool = False, ticket: int | None = None
) -> Call:
    """Release (or leave the queue) by ``token``; with ``forced`` the token is a holder id,
    and the call gets an id of its own, recognised if resent. ``ticket``: the holder's slot
    (None: whatever the token holds), so that a later admission of the token is told apart."""
    return Call(
        load("sem_release"),
        _all(keys),
        (
            token,
            "holder" if forced else "token",
            secrets.token_hex(4) if forced else "-",
            "" if ticket is None else str(ticket),
        ),
    )


def refresh_call(keys: SemaphoreKeys, token: str, ttl_ms: int, ticket: int | None) -> Call:
    """Refresh the slot of ``token`` admitted with ``ticket`` (None: whatever its ticket)."""
    return Call(
        load("sem_refresh"), _all(keys), (token, ttl_ms, "" if ticket is None else str(ticket))
    )


def state_call(keys: SemaphoreKeys, token: str | None) -> Call:
    return Call(load("sem_state"), keys.state, (token or "",))


def decode_state(reply: Sequence[Any]) -> SemaphoreState:
    count, limit, waiting, ttl_ms = (int(value) for value in reply[:4])
    ticket = text(reply[5]) if len(reply) > 5 else ""
    return SemaphoreState(
        count=count,
        limit=limit or None,
        waiting=waiting,
        ttl_ms=ttl_ms if ttl_ms >= 0 else None,
        ticket=int(ticket) if ticket else None,
    )

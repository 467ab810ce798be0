"""The Python side of each lock script: build the call, decode the reply. Pure, no I/O.

Sync and async code paths share these functions, so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .keys import LockKeys
from .scripting import Call, load

__all__ = [
    "FENCE_RETENTION_MS",
    "Acquired",
    "Contended",
    "LockState",
    "acquire_call",
    "decode_acquire",
    "decode_extend",
    "decode_release",
    "decode_state",
    "extend_call",
    "release_call",
    "state_call",
]

#: How long a name's fencing counter outlives its last lock (ms). Past that, the next fence
#: still comes out larger, from the server clock in microseconds.
FENCE_RETENTION_MS = 24 * 3600 * 1000

RELEASED = 1
NOT_HELD = 0
OTHER_HOLDER = -1


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class Acquired:
    fence: int
    ttl_ms: int
    server_now_ms: int
    retried: bool  # the token already held the lock: an earlier attempt's reply was lost


@dataclass(frozen=True, slots=True)
class Contended:
    holder_ttl_ms: int  # remaining life of the current holder (-1: no expiry, -2: just gone)


@dataclass(frozen=True, slots=True)
class LockState:
    held: bool
    owned: bool
    ttl_ms: int | None
    fence: int | None


def acquire_call(keys: LockKeys, token: str, ttl_ms: int, metadata: str) -> Call:
    return Call(
        load("lock_acquire"),
        (keys.lock, keys.fence, keys.wait, keys.registry),
        (token, ttl_ms, metadata, keys.member, FENCE_RETENTION_MS),
    )


def decode_acquire(reply: Sequence[Any]) -> Acquired | Contended:
    if int(reply[0]) == 1:
        return Acquired(
            fence=int(_text(reply[1])),
            ttl_ms=int(reply[2]),
            server_now_ms=int(reply[3]),
            retried=int(reply[4]) == 1,
        )
    return Contended(holder_ttl_ms=int(reply[1]))


def release_call(keys: LockKeys, token: str, channel: str) -> Call:
    return Call(
        load("lock_release"),
        (keys.lock, keys.fence, keys.wait, keys.registry),
        (token, keys.member, channel, FENCE_RETENTION_MS),
    )


def decode_release(reply: Any) -> int:
    """RELEASED (also for a repeated release of the same token), NOT_HELD or OTHER_HOLDER."""
    return int(reply)


def extend_call(keys: LockKeys, token: str, ms: int, mode: str, cap_ms: int) -> Call:
    """``mode``: "add" (remaining + ms), "set" (exactly ms) or "max" (at least ms)."""
    return Call(
        load("lock_extend"), (keys.lock, keys.registry), (token, ms, mode, keys.member, cap_ms)
    )


def decode_extend(reply: Sequence[Any]) -> int | None:
    """New TTL in ms; None with the code in ``extend_failure`` otherwise."""
    return int(reply[1]) if int(reply[0]) == 1 else None


def extend_failure(reply: Sequence[Any]) -> int:
    return int(reply[0])


def state_call(keys: LockKeys, token: str | None) -> Call:
    return Call(load("lock_state"), (keys.lock,), (token or "",))


def decode_state(reply: Sequence[Any]) -> LockState:
    if int(reply[0]) == 0:
        return LockState(held=False, owned=False, ttl_ms=None, fence=None)
    return LockState(
        held=True, owned=int(reply[1]) == 1, ttl_ms=int(reply[2]), fence=int(_text(reply[3]))
    )

"""Decoded script replies shared by locks and semaphores. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "NOT_HELD",
    "OTHER_HOLDER",
    "RELEASED",
    "Acquired",
    "Contended",
    "decode_handover",
    "decode_renewal",
    "loss_reason",
    "text",
]

# Release and renewal codes of the scripts.
RELEASED = 1
NOT_HELD = 0
OTHER_HOLDER = -1


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
    """No grant. ``holder_ttl_ms``: until the (first) holder expires (-1: no expiry known)."""

    holder_ttl_ms: int
    position: int = 0  # 1-based place in the queue (0: not queued)
    server_now_ms: int | None = None


def decode_acquired(reply: Sequence[Any]) -> Acquired:
    return Acquired(
        fence=int(text(reply[1])),
        ttl_ms=int(reply[2]),
        server_now_ms=int(reply[3]),
        retried=int(reply[4]) == 1,
    )


def decode_handover(payload: str) -> Acquired | float:
    """What a wake-up message says (see :mod:`.wakeup`): "<fence or ticket>|<ttl ms>|<granted
    at, server ms>", the hold was handed over (an Acquired whose ``server_now_ms`` is the
    grant's time); "0|<ms>", the lock stays kept for its holder's slice that long (the
    seconds to wait before trying)."""
    parts = payload.split("|")
    if int(parts[0]) == 0:
        return int(parts[1]) / 1000
    return Acquired(
        fence=int(parts[0]), ttl_ms=int(parts[1]), server_now_ms=int(parts[2]), retried=False
    )


def decode_renewal(reply: Sequence[Any]) -> int | None:
    """A ``{1, new_ttl_ms, now_ms}`` / ``{0}`` / ``{-1}`` reply: the new TTL in ms, or None."""
    return int(reply[1]) if int(reply[0]) == 1 else None


def loss_reason(code: int) -> str:
    """Why a hold is gone, from a release or renewal code."""
    if code == OTHER_HOLDER:
        return "it expired and another holder took it"
    return "it expired or was removed"

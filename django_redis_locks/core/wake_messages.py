"""The wake-up message: what a release publishes to a waiting process, and how it is read.

This is the one definition of the format; the Lua scripts build it (lib/lock, lib/semaphore,
lock_release, sem_release) and :mod:`.wakeup` passes it on to the waiter it names. Each
process listens on a channel of its own (``<ns>:wake:<random id>``), which a waiter records
with its place in a queue; a release publishes there, one message per waiter that may now go
ahead::

    <member>#<holder id>                       try now: the name is free, or was handed to
                                               you for a moment (confirm it by trying)
    <member>#<holder id>|<ms>                  the name stays kept for its holder's slice
                                               this many ms
    <member>#<holder id>|<n>|<ttl>|<at>        the name is yours for <ttl> ms from <at> (ms,
                                               server time): fence (lock) or ticket
                                               (semaphore) <n>

``member`` is ``"lock:<name>"`` or ``"sem:<name>"``, ``holder id`` the waiter's (see
:mod:`.holder`).
"""

from __future__ import annotations

import re

from .replies import Acquired

__all__ = ["decode_wake", "split_message"]

#: A wake-up message with news after the waiter key: "|<ms>" or "|<n>|<ttl ms>|<at ms>".
_WITH_NEWS = re.compile(r"(.*#[0-9a-f]{16})\|(\d+(?:\|\d+\|\d+)?)", re.DOTALL)


def split_message(data: str) -> tuple[str, str]:
    """(waiter key, news or "") of a wake-up message."""
    match = _WITH_NEWS.fullmatch(data)
    return (match[1], match[2]) if match else (data, "")


def decode_wake(news: str) -> Acquired | float | None:
    """What a waiter was told: None, try now; the seconds to wait before trying; or the hold
    it was handed (an Acquired whose ``server_now_ms`` is the grant's time)."""
    if not news:
        return None
    parts = news.split("|")
    if len(parts) == 1:
        return int(parts[0]) / 1000
    return Acquired(
        fence=int(parts[0]), ttl_ms=int(parts[1]), server_now_ms=int(parts[2]), retried=False
    )

"""The wake-up message: what a release publishes to a waiting process, and how it is read.

This is the one definition of the format; the Lua scripts build it (lib/lock, lib/semaphore,
lock_release, sem_release) and :mod:`..runtime.wakeup` passes it on to the waiter it names. Each
process listens on a channel of its own (``<ns>:wake:<random id>``), which a waiter records
with its place in a queue; a release publishes there, one message per waiter that may now go
ahead::

    <member>#<holder id>          try now: the name is free, or was handed to you for a
                                  moment (confirm it by trying)
    <member>#<holder id>|<ms>     the name stays kept for its holder's slice this many ms

A message never grants anything by itself: a waiter learns that it holds the name only from
the reply to its own script, so what it believes never depends on who heard the message.

``member`` is ``"lock:<name>"`` or ``"sem:<name>"``, ``holder id`` the waiter's (see
:mod:`.holder`).
"""

from __future__ import annotations

import re

__all__ = ["decode_wake", "split_message"]

#: A wake-up message with news after the waiter key: "|<ms>".
_WITH_NEWS = re.compile(r"(.*#[0-9a-f]{16})\|(\d+)", re.DOTALL)


def split_message(data: str) -> tuple[str, str]:
    """(waiter key, news or "") of a wake-up message."""
    match = _WITH_NEWS.fullmatch(data)
    return (match[1], match[2]) if match else (data, "")


def decode_wake(news: str) -> float | None:
    """What a waiter was told: None, try now; or the seconds to wait before trying."""
    return int(news) / 1000 if news else None

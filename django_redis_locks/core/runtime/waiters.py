"""A blocked caller's registration for wake-ups: :class:`SyncWaiter` for a thread or
greenlet, :class:`AsyncWaiter` for an asyncio task. A :class:`.wakeup.WakeupHub` makes them,
wakes them with the news of their message (see :mod:`..protocol.wake_messages`) and, for sync
waiters, lets one of them read the subscription itself (:meth:`.wakeup.WakeupHub.wait_sync`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Protocol

__all__ = ["AsyncWaiter", "Hub", "SyncWaiter", "Waiter"]


class Hub(Protocol):
    """What a waiter asks of the hub that made it (:class:`.wakeup.WakeupHub`): the one
    dependency between the two modules points from the hub to its waiters."""

    def wait_sync(self, waiter: SyncWaiter, timeout: float) -> str | None: ...

    def unregister(self, waiter: Waiter) -> None: ...


class SyncWaiter:
    """A thread's (or greenlet's) registration for wake-ups under one key."""

    __slots__ = ("_event", "_news", "_woken", "blocked", "hub", "member")

    def __init__(self, hub: Hub, member: str) -> None:
        self.hub = hub
        self.member = member
        self._event = threading.Event()
        self._news = ""
        self._woken = False
        #: In the hub's wait, not reading: the one kind of waiter a reader that leaves may
        #: hand the reading on to (one on its way to its acquire would not read).
        self.blocked = False

    def wake(self, news: str = "") -> None:
        self._news = news  # the latest message counts
        self._woken = True
        self._event.set()

    def poke(self) -> None:
        """Not a wake-up: the reader left, this waiter may take over reading."""
        self._event.set()

    def wait(self, timeout: float) -> str | None:
        """Block up to ``timeout`` seconds. None if not woken, else the message's news ("":
        try now; see :func:`decode_wake`). Consumes the wake-up."""
        return self.hub.wait_sync(self, timeout)

    def take(self) -> str | None:
        """The news if woken (consumed), else None; clears the event either way."""
        self._event.clear()  # first: a wake-up that comes after this is not lost
        if not self._woken:
            return None
        self._woken = False
        news, self._news = self._news, ""
        return news

    def close(self) -> None:
        self.hub.unregister(self)


class AsyncWaiter:
    """An asyncio task's registration for wake-ups under one key."""

    __slots__ = ("_event", "_loop", "_news", "hub", "member")

    def __init__(self, hub: Hub, member: str) -> None:
        self.hub = hub
        self.member = member
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._news = ""

    def wake(self, news: str = "") -> None:
        self._news = news  # the latest message counts; read by wait() on the loop
        with contextlib.suppress(RuntimeError):  # a closed loop has nobody waiting any more
            self._loop.call_soon_threadsafe(self._event.set)

    def poke(self) -> None:
        """asyncio waiters never read: nothing to take over."""

    async def wait(self, timeout: float) -> str | None:
        """Wait up to ``timeout`` seconds. None if not woken, else the message's news ("":
        try now; see :func:`decode_wake`). Consumes the wake-up."""
        try:
            async with asyncio.timeout(max(timeout, 0.0)):
                await self._event.wait()
        except TimeoutError:
            return None
        finally:
            self._event.clear()
        news, self._news = self._news, ""
        return news

    def close(self) -> None:
        self.hub.unregister(self)


Waiter = SyncWaiter | AsyncWaiter

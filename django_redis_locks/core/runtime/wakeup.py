"""Wake blocked waiters when a lock is released: one pub/sub connection per process and server.

Each process listens on a channel of its own, which a waiter records with its place in a
queue; release scripts publish there, one message per waiter that may now go ahead (the
format: :mod:`..protocol.wake_messages`; the waiters: :mod:`.waiters`). Uncontended releases publish
nothing, and no process hears of another's waiters. In each process one subscription per
(client, namespace) carries every wake-up (:mod:`.subscription`); a blocked thread reads it
itself while nobody else does, so its own wake-up comes without a hop through another
thread, and it wakes the other waiters whose messages it reads (sync through
``threading.Event``, asyncio through ``loop.call_soon_threadsafe``). While asyncio waiters
wait, a listener thread reads for them. However many callers wait, the process holds one
extra connection per server.

Waiters never rely on a notification alone: each wait is bounded (by the holder's remaining
TTL and a re-check interval), so a lost message costs latency, never liveness. After the
subscription is back from a failure everybody is woken, since messages may have been missed
meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import threading
import time
from typing import Any

from django_redis_locks.core.protocol.wake_messages import split_message

from .exiting import exiting, quiet_at_exit, stop_at_exit
from .ownership import runtime_key
from .subscription import Subscription
from .waiters import AsyncWaiter, SyncWaiter, Waiter

__all__ = ["WakeupHub", "hub_for"]

logger = quiet_at_exit(logging.getLogger(__name__))

#: The longest one read of the subscription blocks; also how fast the listener thread notices
#: it has become idle.
_POLL_SECONDS = 1.0
#: The listener thread ends after this long without waiters.
_IDLE_EXIT_SECONDS = 30.0


class WakeupHub:
    """This process's wake-ups from one server, shared by all its waiters.

    ``channel`` is ``<prefix>:<random id>``: waiters hand it to the scripts with their place
    in a queue, and releases publish there, so a wake-up reaches only the process it is for.

    Who reads the subscription: a blocked sync waiter reads it itself (one at a time, under
    the reader lock), so its own wake-up needs no hop through another thread; it dispatches
    the other waiters' messages as it reads them, and when it leaves it hands reading on to
    another blocked waiter. asyncio waiters cannot block their loop: while any wait, a
    listener thread reads for them (and for everyone).
    """

    def __init__(self, client: Any, prefix: str) -> None:
        self._channel = f"{prefix}:{secrets.token_hex(6)}"
        self._mutex = threading.Lock()  # the registrations, the thread, the futures
        self._reader = threading.Lock()  # held by whoever reads the subscription
        self._waiters: dict[str, set[Waiter]] = {}
        self._async_waiters = 0
        self._ready = threading.Event()
        self._ready_futures: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._thread: threading.Thread | None = None
        self._idle_since = time.monotonic()
        self._stopped = False
        self._subscription = Subscription(
            client,
            self._channel,
            on_subscribed=self._subscribed,
            on_message=self._message,
            on_broken=self._broken,
        )
        self.runtime = runtime_key()
        self._exit = False  # the interpreter exits: the listener thread ends
        stop_at_exit(self)

    # -- registration ------------------------------------------------------------------
    def register(self, member: str) -> SyncWaiter:
        waiter = SyncWaiter(self, member)
        with self._mutex:
            self._waiters.setdefault(member, set()).add(waiter)
        return waiter

    def register_async(self, member: str) -> AsyncWaiter:
        waiter = AsyncWaiter(self, member)
        thread = None
        with self._mutex:
            self._waiters.setdefault(member, set()).add(waiter)
            self._async_waiters += 1
            if self._thread is not None and not self._thread.is_alive():
                logger.warning("wake-up listener on %s had died; starting it again", self._channel)
                self._thread = None
            if self._thread is None and not exiting():
                thread = self._thread = threading.Thread(
                    target=self._run, name=f"drl-wakeup-{self._channel}", daemon=True
                )
        if thread is not None:
            thread.start()  # outside the mutex: under gevent, starting may switch greenlets
        return waiter

    def unregister(self, waiter: Waiter) -> None:
        with self._mutex:
            group = self._waiters.get(waiter.member)
            if group is not None and waiter in group:
                group.discard(waiter)
                if not group:
                    del self._waiters[waiter.member]
                if isinstance(waiter, AsyncWaiter):
                    self._async_waiters -= 1
            if not self._waiters:
                self._idle_since = time.monotonic()

    # -- waiting -------------------------------------------------------------------------
    def wait_ready(self, timeout: float) -> bool:
        """Block until the subscription is confirmed, at most ``timeout`` seconds (reading
        it meanwhile if nobody else does)."""
        deadline = time.monotonic() + max(timeout, 0.0)
        while not self._ready.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._reader.acquire(blocking=False):
                try:
                    self._subscription.read(min(left, _POLL_SECONDS))
                finally:
                    self._reader.release()
                    self._hand_reading_on(None)
            else:
                self._ready.wait(min(left, _POLL_SECONDS))
        return True

    def wait_sync(self, waiter: SyncWaiter, timeout: float) -> str | None:
        """:meth:`SyncWaiter.wait`: read the subscription while nobody else does, else wait
        to be woken (or to be handed the reading)."""
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            news = waiter.take()
            if news is not None:
                return news
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            waiter.blocked = True  # (before the try: a reader leaving after it pokes it)
            if self._reader.acquire(blocking=False):
                waiter.blocked = False
                try:
                    while not waiter._woken and (left := deadline - time.monotonic()) > 0:
                        self._subscription.read(min(left, _POLL_SECONDS))
                finally:
                    self._reader.release()
                    self._hand_reading_on(waiter)
            else:
                try:
                    waiter._event.wait(left)
                finally:
                    waiter.blocked = False

    async def await_ready(self, timeout: float) -> bool:
        """Asyncio twin of :meth:`wait_ready` (the listener thread reads)."""
        if self._ready.is_set():
            return True
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._mutex:
            self._ready_futures.append((loop, future))
        if self._ready.is_set():
            return True
        try:
            async with asyncio.timeout(max(timeout, 0.0)):
                await future
        except TimeoutError:
            return False
        finally:
            with self._mutex:
                self._ready_futures = [(lp, f) for lp, f in self._ready_futures if f is not future]
        return True

    def _hand_reading_on(self, leaving: SyncWaiter | None) -> None:
        """The reader left: let another sync waiter blocked in its wait read (the listener
        thread, if it runs, reads anyway); one on its way to its acquire would not read."""
        with self._mutex:
            for group in self._waiters.values():
                for other in group:
                    if (
                        other is not leaving
                        and isinstance(other, SyncWaiter)
                        and other.blocked
                        and not other._woken
                    ):
                        other.poke()
                        return

    # -- state ---------------------------------------------------------------------------
    @property
    def channel(self) -> str:
        """This process's wake-up channel on this server."""
        return self._channel

    @property
    def ready(self) -> bool:
        """Whether the subscription is up: a waiter registered now misses no wake-up (or, if
        the connection broke unnoticed, finds out at its next re-check)."""
        return self._ready.is_set()

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self, *, wait: bool = True) -> None:
        """Close the subscription and end the listener thread (the client is going away).
        With ``wait=False`` (a finalizer's) it never blocks: the listener, if it is reading
        right now, closes the subscription when it sees the hub stopped."""
        self._stopped = True
        if self._reader.acquire(blocking=wait):
            try:
                self._subscription.close()
            finally:
                self._reader.release()
        self._ready.clear()

    def stop_for_exit(self) -> threading.Thread | None:
        """The listener ends within a poll; the exit does not wait for it (it has no work
        to finish, and what it would log is silenced)."""
        self._exit = True
        return None

    # -- the listener thread (while asyncio waiters wait) -------------------------------
    def _run(self) -> None:
        try:
            while not self._stopped and not self._exit:
                with self._mutex:
                    idle = time.monotonic() - self._idle_since
                    if not self._async_waiters and (not self._waiters or idle > _IDLE_EXIT_SECONDS):
                        self._thread = None
                        break
                if self._reader.acquire(timeout=_POLL_SECONDS):
                    try:
                        self._subscription.read(_POLL_SECONDS)
                        if self.stopped:  # by a stop() that did not wait for the reader
                            self._subscription.close()
                    finally:
                        self._reader.release()
        except Exception:
            logger.warning(
                "wake-up listener on %s failed; waiters fall back to re-checks until it is "
                "started again",
                self._channel,
                exc_info=True,
            )
            with self._mutex:
                self._thread = None
            self._wake_all()
        self._hand_reading_on(None)

    # -- what the subscription reports ---------------------------------------------------
    def _subscribed(self, recovered: bool) -> None:
        self._ready.set()
        with self._mutex:
            futures, self._ready_futures = self._ready_futures, []
        for loop, future in futures:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, future)
        if recovered:  # messages may have been lost meanwhile
            self._wake_all()

    def _broken(self) -> None:
        self._ready.clear()
        self._wake_all()

    def _message(self, text: str) -> None:
        try:
            self._wake(*split_message(text))
        except Exception:
            logger.warning(
                "wake-up listener on %s failed to pass a message on; its waiter re-checks",
                self._channel,
                exc_info=True,
            )

    def _wake(self, member: str, news: str = "") -> None:
        with self._mutex:
            waiters = list(self._waiters.get(member, ()))
        for waiter in waiters:
            waiter.wake(news)

    def _wake_all(self) -> None:
        with self._mutex:
            waiters = [w for group in self._waiters.values() for w in group]
        for waiter in waiters:
            waiter.wake()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_hubs_mutex = threading.Lock()


def hub_for(client: Any, channel: str) -> WakeupHub:
    """The process-wide hub for ``client`` (a sync redis-py client) and channel prefix
    ``channel``.

    Hubs live on the client object, so they go away with it.
    """
    with _hubs_mutex:
        hubs: dict[str, WakeupHub] = client.__dict__.setdefault("_drl_wakeup_hubs", {})
        hub = hubs.get(channel)
        if hub is None or hub.runtime != runtime_key():  # after fork() or patching: afresh
            hub = hubs[channel] = WakeupHub(client, channel)
        return hub


def _reinit_after_fork() -> None:
    global _hubs_mutex
    _hubs_mutex = threading.Lock()


os.register_at_fork(after_in_child=_reinit_after_fork)

"""Wake blocked waiters when a lock is released: one pub/sub connection per process and server.

Each process listens on a channel of its own (``<ns>:wake:<random id>``), which a waiter
records with its place in a queue. Release scripts publish there, one message per waiter that
may now go ahead. The message format (the scripts build it; :func:`split_message` and
:func:`decode_wake` read it)::

    <member>#<holder id>          try now: the hold was handed (or a slot admitted) to you,
                                  or the name is free
    <member>#<holder id>|<ms>     the name stays kept for its holder's slice this many ms

``member`` is ``"lock:<name>"`` or ``"sem:<name>"``, ``holder id`` the waiter's (see
:mod:`.holder`). Uncontended releases publish nothing, and no process hears of another's
waiters. In each process a single listener thread per (client, namespace) subscribes once and
wakes the local waiter registered under that key, sync (``threading.Event``) and asyncio alike
(through ``loop.call_soon_threadsafe``). However many callers wait, the process holds one
extra connection per server.

Waiters never rely on a notification alone: each wait is bounded (by the holder's remaining
TTL and a re-check interval), so a lost message costs latency, never liveness. After the
listener reconnects it wakes everybody, since messages may have been missed meanwhile. A
listener that cannot subscribe (the server is away, or refuses the channel) says so once at
WARNING, retries with back-off, and says so again when it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import threading
import time
from typing import Any

from redis.exceptions import RedisError

from .ownership import runtime_key

__all__ = ["AsyncWaiter", "SyncWaiter", "WakeupHub", "decode_wake", "hub_for", "split_message"]

logger = logging.getLogger(__name__)

#: How long the listener blocks in one read; also how fast it notices it has become idle.
_POLL_SECONDS = 1.0
#: The listener unsubscribes and ends after this long without waiters.
_IDLE_EXIT_SECONDS = 30.0
#: A wake-up message with news after the waiter key: "<member>#<holder id>|<ms>".
_WITH_NEWS = re.compile(r"(.*#[0-9a-f]{16})\|(\d+)", re.DOTALL)


def split_message(data: str) -> tuple[str, str]:
    """(waiter key, news or "") of a wake-up message."""
    match = _WITH_NEWS.fullmatch(data)
    return (match[1], match[2]) if match else (data, "")


def decode_wake(news: str) -> float | None:
    """What a waiter was told: None, try now; else the seconds to wait before trying."""
    return int(news) / 1000 if news else None


class SyncWaiter:
    """A thread's registration for wake-ups under one key."""

    __slots__ = ("_event", "_news", "hub", "member")

    def __init__(self, hub: WakeupHub, member: str) -> None:
        self.hub = hub
        self.member = member
        self._event = threading.Event()
        self._news = ""

    def wake(self, news: str = "") -> None:
        self._news = news  # the latest message counts
        self._event.set()

    def wait(self, timeout: float) -> str | None:
        """Block up to ``timeout`` seconds. None if not woken, else the message's news ("":
        try now; see :func:`decode_wake`). Consumes the wake-up."""
        if not self._event.wait(max(timeout, 0.0)):
            return None
        self._event.clear()
        news, self._news = self._news, ""
        return news

    def close(self) -> None:
        self.hub.unregister(self)


class AsyncWaiter:
    """An asyncio task's registration for wake-ups under one key."""

    __slots__ = ("_event", "_loop", "_news", "hub", "member")

    def __init__(self, hub: WakeupHub, member: str) -> None:
        self.hub = hub
        self.member = member
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._news = ""

    def wake(self, news: str = "") -> None:
        self._news = news  # the latest message counts; read by wait() on the loop
        with contextlib.suppress(RuntimeError):  # a closed loop has nobody waiting any more
            self._loop.call_soon_threadsafe(self._event.set)

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


class WakeupHub:
    """The listener of this process's channel on one server, shared by all its waiters.

    ``channel`` is ``<prefix>:<process id>``: waiters hand it to the scripts with their place
    in a queue, and releases publish there, so a wake-up reaches only the process it is for.
    """

    def __init__(self, client: Any, prefix: str) -> None:
        self._client = client
        self._channel = f"{prefix}:{secrets.token_hex(6)}"
        self._mutex = threading.Lock()
        self._waiters: dict[str, set[Waiter]] = {}
        self._ready = threading.Event()
        self._ready_futures: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._thread: threading.Thread | None = None
        self._idle_since = time.monotonic()
        self.runtime = runtime_key()

    # -- registration ------------------------------------------------------------------
    def register(self, member: str) -> SyncWaiter:
        waiter = SyncWaiter(self, member)
        self._add(waiter)
        return waiter

    def register_async(self, member: str) -> AsyncWaiter:
        waiter = AsyncWaiter(self, member)
        self._add(waiter)
        return waiter

    def _add(self, waiter: Waiter) -> None:
        thread = None
        with self._mutex:
            self._waiters.setdefault(waiter.member, set()).add(waiter)
            if self._thread is not None and not self._thread.is_alive():
                logger.warning("wake-up listener on %s had died; starting it again", self._channel)
                self._thread = None
            if self._thread is None:
                self._ready.clear()
                thread = self._thread = threading.Thread(
                    target=self._run, name=f"drl-wakeup-{self._channel}", daemon=True
                )
        if thread is not None:
            thread.start()  # outside the mutex: under gevent, starting may switch greenlets

    def unregister(self, waiter: Waiter) -> None:
        with self._mutex:
            group = self._waiters.get(waiter.member)
            if group is not None:
                group.discard(waiter)
                if not group:
                    del self._waiters[waiter.member]
            if not self._waiters:
                self._idle_since = time.monotonic()

    def wait_ready(self, timeout: float) -> bool:
        """Block until the subscription is confirmed, at most ``timeout`` seconds."""
        return self._ready.wait(max(timeout, 0.0))

    async def await_ready(self, timeout: float) -> bool:
        """Asyncio twin of :meth:`wait_ready`."""
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

    @property
    def channel(self) -> str:
        """This process's wake-up channel on this server."""
        return self._channel

    @property
    def listening(self) -> bool:
        return self._thread is not None

    @property
    def ready(self) -> bool:
        """Whether the subscription is up: a waiter registered now misses no wake-up."""
        return self._ready.is_set()

    # -- listener thread -----------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._listen()
        except Exception:
            logger.warning(
                "wake-up listener on %s failed; waiters fall back to re-checks until it is "
                "started again",
                self._channel,
                exc_info=True,
            )
            with self._mutex:
                self._thread = None
                self._ready.clear()
            self._wake_all()

    def _listen(self) -> None:
        pubsub = None
        backoff = 0.05
        failing: str | None = None  # what went wrong, while it goes on
        try:
            while True:
                with self._mutex:
                    idle = time.monotonic() - self._idle_since
                    if not self._waiters and idle > _IDLE_EXIT_SECONDS:
                        self._thread = None
                        self._ready.clear()
                        return
                try:
                    if pubsub is None:
                        pubsub = self._client.pubsub()
                        pubsub.subscribe(self._channel)
                    message = pubsub.get_message(timeout=_POLL_SECONDS)
                except Exception as exc:
                    # RedisError when the server is away or refuses the channel; redis-py may
                    # also raise TypeError or OSError when the client was closed under the
                    # listener. Reconnect, and say so once.
                    if failing is None:
                        logger.warning(
                            "wake-up listener on %s cannot listen (%s: %s); retrying, and "
                            "waiters re-check every second meanwhile",
                            self._channel,
                            type(exc).__name__,
                            exc,
                        )
                    failing = f"{type(exc).__name__}: {exc}"
                    self._ready.clear()
                    _close(pubsub)
                    pubsub = None
                    self._wake_all()
                    time.sleep(backoff)  # reconnect back-off, not synchronisation
                    backoff = min(backoff * 2, 1.0)
                    continue
                if message is None:
                    continue
                if message["type"] == "subscribe":
                    backoff = 0.05
                    self._set_ready()
                    if failing is not None:  # messages may have been lost meanwhile
                        logger.warning("wake-up listener on %s listens again", self._channel)
                        failing = None
                        self._wake_all()
                elif message["type"] == "message":
                    data = message["data"]
                    text = data.decode("utf-8") if isinstance(data, bytes) else str(data)
                    self._wake(*split_message(text))
        finally:
            _close(pubsub)

    def _set_ready(self) -> None:
        self._ready.set()
        with self._mutex:
            futures, self._ready_futures = self._ready_futures, []
        for loop, future in futures:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, future)

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


def _close(pubsub: Any) -> None:
    if pubsub is not None:
        with contextlib.suppress(RedisError, OSError, TypeError):  # a dead connection
            pubsub.close()


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

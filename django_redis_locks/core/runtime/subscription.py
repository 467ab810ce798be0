"""The pub/sub connection on which a process hears its wake-ups: subscribe, read, recover.

One :class:`Subscription` per process and server (owned by its :class:`.wakeup.WakeupHub`).
Whoever reads it must hold the hub's reader lock: one reader at a time. :meth:`read` reads
at most one message within a timeout and hands what it read to the hub's callbacks. It
(re)connects and (re)subscribes by itself; while it cannot (the server is away, the ACL
refuses the channel or ``SUBSCRIBE``), it says so once at WARNING, backs off (up to 1 s
between tries), and says so again when it listens again.

Its connection comes from the client's pool. One opened before the process was monkey-patched
(gevent, eventlet: code that patches after the library worked) has a plain socket, and a read
on it would block every greenlet of the process, the releaser of the lock a waiter reads for
included: such a connection is opened again on a socket of the patched kind.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from django_redis_locks.core.connection.libraries import backend_errors

__all__ = ["Subscription"]

logger = logging.getLogger("django_redis_locks.core.runtime.wakeup")

_FIRST_BACKOFF = 0.05
_MAX_BACKOFF = 1.0


class Subscription:
    """A subscription to ``channel`` on ``client``'s server; see the module doc."""

    def __init__(
        self,
        client: Any,
        channel: str,
        *,
        on_subscribed: Callable[[bool], None],
        on_message: Callable[[str], None],
        on_broken: Callable[[], None],
    ) -> None:
        self._client = client
        self.channel = channel
        self._on_subscribed = on_subscribed  # (after a failure?) the subscription is up
        self._on_message = on_message
        self._on_broken = on_broken  # messages may be lost from now on
        self._pubsub: Any = None
        self._failing: str | None = None  # what went wrong, while it goes on
        self._backoff = _FIRST_BACKOFF
        self._retry_at = 0.0

    def read(self, timeout: float) -> None:
        """Read (and dispatch) at most one message, waiting up to ``timeout`` seconds."""
        wait = self._retry_at - time.monotonic()
        if wait > 0:  # backing off after a failure
            time.sleep(min(wait, timeout))  # the back-off itself, bounded by the caller
            if wait > timeout:
                return
        try:
            if self._pubsub is None:
                self._pubsub = self._client.pubsub()
                self._pubsub.subscribe(self.channel)
                _reopen_if_unpatched(self._pubsub.connection)
            message = self._pubsub.get_message(timeout=max(timeout, 0.0))
        except Exception as exc:
            # RedisError when the server is away or refuses the channel; redis-py may also
            # raise TypeError or OSError when the client was closed under the reader.
            self._failed(exc)
            return
        if message is None:
            return
        if message["type"] == "subscribe":
            self._backoff = _FIRST_BACKOFF
            recovered = self._failing is not None
            if recovered:
                logger.warning("wake-up listener on %s listens again", self.channel)
                self._failing = None
            self._on_subscribed(recovered)
        elif message["type"] == "message":
            data = message["data"]
            self._on_message(data.decode("utf-8") if isinstance(data, bytes) else str(data))

    def close(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(*backend_errors(), OSError, TypeError):  # a dead connection
                pubsub.close()

    def _failed(self, exc: Exception) -> None:
        if self._failing is None:
            logger.warning(
                "wake-up listener on %s cannot listen (%s: %s); retrying, and waiters re-check "
                "every second meanwhile",
                self.channel,
                type(exc).__name__,
                exc,
            )
        self._failing = f"{type(exc).__name__}: {exc}"
        self.close()
        self._on_broken()
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, _MAX_BACKOFF)


def _reopen_if_unpatched(connection: Any) -> None:
    """Close ``connection`` if its socket is not of the kind ``socket.socket`` is now (it was
    opened before a monkey-patch): the next read opens it again and subscribes again (redis-py
    subscribes a pub/sub's channels on every connect). Once per subscription, so a socket class
    that does not derive from the patched one (eventlet's TLS socket) costs one reconnect."""
    sock = getattr(connection, "_sock", None)
    if sock is not None and not isinstance(sock, socket.socket):
        connection.disconnect()

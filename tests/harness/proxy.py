"""A TCP proxy in front of a real Redis server that can withhold or delay its replies.

Clients connect to the proxy; each connection gets its own upstream connection and two pump
threads. Commands always reach the server. Replies (server to client) are forwarded, dropped
(``drop_replies``: the server applied the command, the client never hears of it and times
out), delayed (``delay_replies``: each chunk is held back for a while) or cut once
(``cut_next_reply``: the next reply is dropped and its connection closed, as by a network
fault; the client sees a broken connection, and redis-py resends the command on a new one).
``withhold_next_request(containing)`` keeps the next request that contains those bytes from
the server and closes its connection (the client resends it on a new one);
``deliver_withheld()`` sends it to the server later, on a connection of its own, as TCP
delivers a closed socket's unsent data, or a proxy or a paused server reads a request late.
``partition()`` also refuses new connections and stalls every open one until it ends.
``holding_requests()`` keeps every client's requests back until it ends (nothing a client sends
in it can run between the commands a test runs on another connection meanwhile).
toxiproxy and tc netem are not available here; this is the small part of them the tests need.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Literal, Self

Mode = Literal["forward", "drop", "delay", "cut", "sever"]
_CHUNK = 65536


class ReplyProxy:
    """Forwards 127.0.0.1:<port> to ``upstream``; see the module docstring."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.host = "127.0.0.1"
        self.port = 0
        self._mode: Mode = "forward"
        self._delay = 0.0
        self._mutex = threading.Lock()
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        self.connections = 0
        self.dropped_bytes = 0
        self.delayed_chunks = 0
        self.cuts = 0
        self.severed = 0  # partitions that began as a reply was on its way
        self._partitioned = False
        self._sever_on = b""
        self._withhold = b""  # the next request containing this is withheld ("": none)
        self.withheld: list[bytes] = []
        self._healed = threading.Event()
        self._healed.set()
        self._request_gate = threading.Lock()  # held by holding_requests(); pumps pass it

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self) -> Self:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, 0))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._spawn(self._accept, "proxy-accept")
        return self

    def stop(self) -> None:
        """Close the listener and every connection; wait for the pump threads."""
        self._stopped.set()
        self._healed.set()
        if self._listener is not None:
            _close(self._listener)  # shutdown() wakes the blocked accept(); close() does not
        with self._mutex:
            sockets = list(self._sockets)
        for sock in sockets:
            _close(sock)
        for thread in self._threads:
            thread.join(timeout=5)

    # -- what happens to replies ---------------------------------------------------------
    def forward_replies(self) -> None:
        self._set("forward", 0.0)

    def drop_replies(self) -> None:
        """Discard every reply from now on (commands still reach the server)."""
        self._set("drop", 0.0)

    def cut_next_reply(self) -> None:
        """Drop the next reply and close its connection (once; then forward again)."""
        self._set("cut", 0.0)

    @contextlib.contextmanager
    def partition(self, *, after_next_reply: bool = False, starting: bytes = b"") -> Iterator[None]:
        """Inside the block nothing passes either way, and new connections are accepted but
        never reach the server (clients time out); after it, new connections work again and
        the open ones are closed, as a network fault leaves them. With ``after_next_reply``
        the cut comes as the next reply (that starts with ``starting``) is on its way: the
        command reached the server, its reply is lost, and from that moment on the network is
        cut; until then everything passes."""
        with self._mutex:
            self._healed.clear()
            self._sever_on = starting
            if after_next_reply:
                self._mode = "sever"
            else:
                self._partitioned = True
        try:
            yield
        finally:
            with self._mutex:
                sockets = list(self._sockets)
            for sock in sockets:
                _close(sock)
            with self._mutex:
                self._partitioned = False
                self._mode = "forward"
                self._healed.set()

    def withhold_next_request(self, containing: bytes) -> None:
        """Keep the next request (a chunk from a client) that contains ``containing`` from the
        server, and close its connection, once (see :meth:`deliver_withheld`)."""
        with self._mutex:
            self._withhold = containing

    @contextlib.contextmanager
    def holding_requests(self) -> Iterator[None]:
        """Inside the block no request reaches the server: each waits in its pump and goes on
        after the block. Once the block is entered, no request is half-way through
        the proxy (a pump sends while it holds the gate)."""
        with self._request_gate:
            yield

    def deliver_withheld(self, timeout: float = 5.0) -> bytes:
        """Send the oldest withheld request to the server on a new connection; its reply."""
        with self._mutex:
            data = self.withheld.pop(0)
        with socket.create_connection(self.upstream, timeout=timeout) as server:
            server.sendall(data)
            return server.recv(_CHUNK)

    def delay_replies(self, seconds: float) -> None:
        """Hold back every reply chunk for ``seconds`` before passing it on."""
        self._set("delay", seconds)

    @contextlib.contextmanager
    def withholding(self, mode: Mode = "drop", seconds: float = 0.0) -> Iterator[None]:
        """Drop (or delay) replies inside the block, forward them again after it."""
        self._set(mode, seconds)
        try:
            yield
        finally:
            self.forward_replies()

    def _set(self, mode: Mode, delay: float) -> None:
        with self._mutex:
            self._mode, self._delay = mode, delay

    # -- plumbing ------------------------------------------------------------------------
    def _spawn(self, target: object, name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # the listener was closed
            with self._mutex:
                partitioned = self._partitioned
            if partitioned:
                self._spawn(self._stall, "proxy-stalled", client)
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._mutex:
                self._sockets.update((client, server))
                self.connections += 1
            self._spawn(self._pump, "proxy-request", client, server, False)
            self._spawn(self._pump, "proxy-reply", server, client, True)

    def _pump(self, source: socket.socket, target: socket.socket, replies: bool) -> None:
        try:
            while True:
                data = source.recv(_CHUNK)
                if not data:
                    break
                with self._mutex:
                    if (
                        replies and self._mode == "sever" and data.startswith(self._sever_on)
                    ):  # this reply is lost, and so is everything after it
                        self._mode, self._partitioned = "drop", True
                        self.severed += 1
                    partitioned = self._partitioned
                if partitioned:
                    with self._mutex:
                        self.dropped_bytes += len(data)
                    continue
                if not replies:
                    with self._mutex:
                        withhold = bool(self._withhold) and self._withhold in data
                        if withhold:
                            self._withhold = b""
                            self.withheld.append(data)
                    if withhold:
                        break  # (the pair is closed: the client sees its connection broken)
                if replies:
                    with self._mutex:
                        mode, delay = self._mode, self._delay
                    if mode == "cut":
                        with self._mutex:
                            self.cuts += 1
                            self._mode = "forward"  # once
                        break
                    if mode == "drop":
                        with self._mutex:
                            self.dropped_bytes += len(data)
                        continue
                    if mode == "delay":
                        with self._mutex:
                            self.delayed_chunks += 1
                        time.sleep(delay)  # the injected latency itself
                    target.sendall(data)
                else:
                    with self._request_gate:
                        target.sendall(data)
        except OSError:
            pass
        finally:
            # One side is gone: end the pair (the other pump sees its socket closed).
            for sock in (source, target):
                _close(sock)
                with self._mutex:
                    self._sockets.discard(sock)

    def _stall(self, client: socket.socket) -> None:
        """A connection made during a partition: it goes nowhere until the partition ends."""
        with self._mutex:
            self._sockets.add(client)
        self._healed.wait()
        _close(client)
        with self._mutex:
            self._sockets.discard(client)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()

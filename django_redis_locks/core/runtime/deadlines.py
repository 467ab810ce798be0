"""Requests that can grant are bounded in server time.

A copy of a request can reach Redis long after it was sent: the client library resends a
script on a new connection when the old one broke before the reply came (see
:mod:`.resends`), and the first copy may still be on its way (TCP retransmits a closed
socket's unsent data, a proxy holds it, a paused server reads it late). A copy of an acquire
that lands after the hold it made was released would take the name again, for a token nobody
holds, for its TTL. Two things close that, whatever the lateness:

- every request that can create a hold or a place in a queue (the acquire scripts) carries a
  *deadline* in the server's clock, and the script writes nothing once its ``TIME`` is past
  it (it replies ``{TOO_LATE, now_ms}``);
- a hold whose acquire went out more than once is watched after it ends, until that
  request's deadline has passed, by the background undo (:mod:`.renewal`), so a copy that
  lands after the release is undone within a re-check interval (see :mod:`.acquiring`).

**The deadline** is ``now + offset + window``. The offset between the server's clock (its
``TIME``, in ms) and this process's monotonic clock is learned from server times already
seen (:class:`ServerClock`): every acquire reply carries the server's time, and before its
first acquire on a server a process asks once (``TIME``), so the hot path costs no extra
command. It is a lower bound: the time a reply carries was read before the reply arrived.
The *window* (:func:`request_window`) is how long the client may still wait for the request:
a free connection (at most a socket timeout, for the Backend's pools), then its reply (a
socket timeout): twice the socket timeout, or :data:`NO_TIMEOUT_WINDOW` seconds for a client
without one. A request that comes later is refused and asked again (a fresh deadline, the
same token), so a short window costs a round trip now and then, never a grant.

**Back to the local clock.** Knowing when, locally, the server's clock has passed a deadline
(:func:`passed`) takes a server time read no later than some local instant (a reply's, or
the offset's last sample) and the span to the deadline, stretched by :data:`CLOCK_RATE` (the
two clocks may run at slightly different rates) plus :data:`CLOCK_SLACK` (the server's whole
milliseconds). This assumes the server's clock does not step back (the fences assume it too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = [
    "CLOCK_RATE",
    "CLOCK_SLACK",
    "NO_TIMEOUT_WINDOW",
    "ServerClock",
    "passed",
    "request_window",
    "server_ms",
]

#: The window of a client without a socket timeout (seconds).
NO_TIMEOUT_WINDOW = 10.0
#: How much faster the server's clock may run than this process's, or slower: 0.1 %, ten
#: times what a crystal oscillator without NTP drifts, twice NTP's largest slew.
CLOCK_RATE = 0.001
#: Added to every span converted to the local clock (seconds): the server's whole millisecond
#: (a request at ``now_ms == deadline`` is still valid), and one more.
CLOCK_SLACK = 0.002


def request_window(socket_timeout: float | None) -> float:
    """How long after it is sent a request that can grant stays valid (seconds): twice
    ``socket_timeout`` (a free connection, then the reply), or :data:`NO_TIMEOUT_WINDOW`."""
    return 2 * socket_timeout if socket_timeout else NO_TIMEOUT_WINDOW


def passed(read_at: float, span_ms: float) -> float:
    """The local (monotonic) time by which the server's clock, read at or before ``read_at``,
    has advanced ``span_ms`` further, and then some: past it, a deadline ``span_ms`` after
    that reading has passed on the server."""
    return read_at + max(span_ms, 0.0) / 1000 * (1 + CLOCK_RATE) + CLOCK_SLACK


def server_ms(time_reply: Sequence[Any]) -> int:
    """A ``TIME`` reply (seconds, microseconds) in milliseconds."""
    return int(time_reply[0]) * 1000 + int(time_reply[1]) // 1000


class ServerClock:
    """One server's clock as this process knows it: the last server time seen and when.

    One per Backend and server (Cluster node); see
    :meth:`..connection.backend.Backend.server_clock`.
    """

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        # The last server time seen (ms), in a reply received at a local (monotonic) time: one
        # tuple, replaced whole, so that threads never read one's time with another's moment.
        self._seen: tuple[int, float] | None = None

    @property
    def known(self) -> bool:
        return self._seen is not None

    def learn(self, server_now_ms: int, received_at: float) -> None:
        """A reply received at ``received_at`` said the server's time was ``server_now_ms``."""
        self._seen = (server_now_ms, received_at)

    def deadline_ms(self, now: float, window: float) -> int:
        """The deadline (server ms) of a request sent at ``now`` that is valid ``window``
        seconds. Requires :attr:`known`."""
        assert self._seen is not None
        server_ms, read_at = self._seen
        return server_ms + math.floor(round((now - read_at + window) * 1000, 6))

    def passed(self, deadline_ms: int) -> float:
        """The local time by which the server's clock has passed ``deadline_ms``, by the last
        time seen (use the reply's own time when there is one: see :func:`passed`)."""
        assert self._seen is not None
        server_ms, read_at = self._seen
        return passed(read_at, deadline_ms - server_ms)

"""Hot locks: the most contended lock and semaphore names over a recent window.

The scripts count contention where it happens, and only there (lib/hot.lua): a try refused,
a waiter queued or giving up, a grant after a wait with how long it waited, a hold released
while others waited with how long it lasted. Each bucket keeps the figures of at most
:data:`.protocol.constants.HOT_NAMES` names, over the last 5 and the last 60 minutes, so a
reader sees them from any process (the admin's "Hot locks" page, ``manage.py redis_locks
hot``) with one round trip (one read script per bucket), whatever else the database holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .connection.backend import Backend, backend_of
from .errors import InvalidArgument, InvalidArgumentType
from .protocol.hot_figures import WINDOWS_MS, Figures, decode_figures
from .protocol.keys import BUCKETS, LOCK_KIND, SEMAPHORE_KIND
from .protocol.replies import text
from .protocol.scripting import Call, load
from .runtime.driver import EvalMany, Operation, drive
from .validation import check_count

__all__ = ["WINDOWS", "HotName", "hot_names"]

Kind = Literal["lock", "semaphore"]
#: The windows one can ask for, in seconds: the last 5 and the last 60 minutes.
WINDOWS = tuple(ms // 1000 for ms in WINDOWS_MS)
#: Most names one call returns.
MAX_HOT_NAMES = 1000
_KINDS: dict[str, Kind] = {LOCK_KIND: "lock", SEMAPHORE_KIND: "semaphore"}


@dataclass(frozen=True, slots=True)
class HotName:
    """How contended one lock or semaphore was over the last ``window`` seconds.

    ``refused``: tries refused (``blocking=False``); ``queued``: callers that waited (took a
    place in the queue); ``left``: waiters that gave up (timed out or were cancelled);
    ``waits``: waits that ended with the lock (or a slot), ``wait_seconds`` their total and
    ``longest_wait`` the longest; ``holds``: holds released while others waited,
    ``hold_seconds`` their total and ``longest_hold`` the longest. Counts over the window
    are estimates (the scripts keep the current window and the one before; see
    :mod:`.protocol.hot_figures`); the longest wait and hold may come from up to twice
    the window back.
    """

    name: str
    kind: Kind
    window: int
    refused: int
    queued: int
    left: int
    waits: int
    wait_seconds: float
    longest_wait: float
    holds: int
    hold_seconds: float
    longest_hold: float

    @property
    def contended(self) -> int:
        """Callers that did not get the name at once: refused tries and queued waiters."""
        return self.refused + self.queued

    @property
    def mean_wait(self) -> float | None:
        """The mean of the waits that ended with the name (seconds), None if none did."""
        return self.wait_seconds / self.waits if self.waits else None

    @property
    def mean_hold(self) -> float | None:
        """The mean length of the holds others waited for (seconds), None if none ended."""
        return self.hold_seconds / self.holds if self.holds else None

    @classmethod
    def from_figures(cls, member: str, window: int, figures: Figures) -> HotName:
        kind, _, name = member.partition(":")
        return cls(
            name=name,
            kind=_KINDS[kind],
            window=window,
            refused=figures.refused,
            queued=figures.queued,
            left=figures.left,
            waits=figures.waits,
            wait_seconds=figures.wait_ms / 1000,
            longest_wait=figures.longest_wait_ms / 1000,
            holds=figures.holds,
            hold_seconds=figures.hold_ms / 1000,
            longest_hold=figures.longest_hold_ms / 1000,
        )


def hot_names(
    window: int = WINDOWS[0],
    *,
    count: int = 20,
    kind: Kind | None = None,
    using: str | None = None,
    client: Any = None,
) -> list[HotName]:
    """The ``count`` most contended names (locks and semaphores, or one ``kind``) over the
    last ``window`` seconds (300 or 3600), most contended first (refused tries and queued
    waiters, then total wait). Names nobody contended in the window are left out.

    Raises InvalidArgument(Type) for a bad window, count or kind, LockBackendError when
    Redis fails.
    """
    window = _check_window(window)
    count = check_count(count, MAX_HOT_NAMES)
    if kind not in (None, "lock", "semaphore"):
        raise InvalidArgument("kind", f"must be 'lock', 'semaphore' or None, not {kind!r}")
    backend = backend_of(using, client)
    found = drive(_read(backend, window), backend)
    if kind is not None:
        found = [hot for hot in found if hot.kind == kind]
    found.sort(key=lambda hot: (-hot.contended, -hot.wait_seconds, hot.kind, hot.name))
    return found[:count]


def _read(backend: Backend, window: int) -> Operation[list[HotName]]:
    calls = tuple(
        Call(load("hot_read"), (backend.keys.registry(bucket).hot,), ())
        for bucket in range(BUCKETS)
    )
    replies = yield EvalMany(calls)
    found = []
    for reply in replies:
        now_ms = int(reply[0])
        for at in range(1, len(reply), 2):
            member = text(reply[at])
            if member.partition(":")[0] not in _KINDS:
                continue
            figures = decode_figures(text(reply[at + 1]), window * 1000, now_ms)
            if figures.refused or figures.queued or figures.left or figures.waits:
                found.append(HotName.from_figures(member, window, figures))
    return found


def _check_window(window: object) -> int:
    if isinstance(window, bool) or not isinstance(window, int):
        raise InvalidArgumentType("window", f"must be an int, not {type(window).__name__}")
    if window not in WINDOWS:
        raise InvalidArgument(
            "window", f"must be one of {', '.join(map(str, WINDOWS))} seconds (got {window})"
        )
    return window

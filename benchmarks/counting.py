"""Count the commands this process sends to Redis, by name (round trips, client side).

Every command redis-py sends, alone, in a pipeline or from a pub/sub connection, is packed by
its connection's command packer; :func:`install` wraps the packers' ``pack`` so each call
increments :data:`COUNTS`. The wrapper costs well under a microsecond per command, against
tens of microseconds for the round trip; it is installed only in worker processes of the
measurements that count, and never while the uncontended cycle is being timed.

:func:`round_trips` counts round trips instead: every write of a connection (one command,
or one whole pipeline) goes through ``send_packed_command``, which it wraps for the block.
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from redis import connection as redis_connection

__all__ = [
    "COUNTS",
    "RoundTrips",
    "counted",
    "install",
    "round_trips",
    "snapshot",
    "total",
    "uninstall",
]

COUNTS: Counter[str] = Counter()
_PACKERS = ("HiredisRespSerializer", "PythonRespSerializer")
_originals: dict[Any, Callable[..., Any]] = {}  # packer class -> its own pack


def _name(args: tuple[Any, ...]) -> str:
    first = args[0] if args else b"?"
    text = first.decode("ascii", "replace") if isinstance(first, bytes) else str(first)
    return text.split(" ", 1)[0].lower()


def _counting(pack: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(pack)
    def wrapper(self: Any, *args: Any) -> Any:
        COUNTS[_name(args)] += 1
        return pack(self, *args)

    return wrapper


def install() -> None:
    """Start counting in this process (idempotent)."""
    if _originals:
        return
    for name in _PACKERS:
        cls = getattr(redis_connection, name, None)
        if cls is not None:
            _originals[cls] = cls.pack
            cls.pack = _counting(cls.pack)


def uninstall() -> None:
    """Stop counting: the packers are as redis-py made them again."""
    while _originals:
        cls, pack = _originals.popitem()
        cls.pack = pack


@contextlib.contextmanager
def counted() -> Iterator[Counter[str]]:
    """Count the commands sent inside the block into the yielded Counter."""
    was_installed = bool(_originals)
    install()
    before = snapshot()
    found: Counter[str] = Counter()
    try:
        yield found
    finally:
        after = snapshot()
        after.subtract(before)
        found.update({name: n for name, n in after.items() if n > 0})
        if not was_installed:
            uninstall()


def snapshot() -> Counter[str]:
    return Counter(COUNTS)


def total(counts: Counter[str]) -> int:
    return sum(counts.values())


class RoundTrips:
    """How many times connections wrote to Redis inside a :func:`round_trips` block."""

    def __init__(self) -> None:
        self.count = 0


@contextlib.contextmanager
def round_trips() -> Iterator[RoundTrips]:
    """Count round trips (a command, or a pipeline, is one write) inside the block."""
    cls = redis_connection.AbstractConnection
    original: Callable[..., Any] = cls.send_packed_command
    found = RoundTrips()

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        found.count += 1
        return original(self, *args, **kwargs)

    cls.send_packed_command = wrapper  # type: ignore[method-assign]
    try:
        yield found
    finally:
        cls.send_packed_command = original  # type: ignore[method-assign]

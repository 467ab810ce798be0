"""Count the commands this process sends to Redis, by name (round trips, client side).

Every command redis-py sends, alone, in a pipeline or from a pub/sub connection, is packed by
its connection's command packer; :func:`install` wraps the packers' ``pack`` so each call
increments :data:`COUNTS`. The wrapper costs well under a microsecond per command, against
tens of microseconds for the round trip, and is installed only in worker processes of the
measurements that count.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

from redis import connection as redis_connection

__all__ = ["COUNTS", "install", "snapshot", "total"]

COUNTS: Counter[str] = Counter()
_PACKERS = ("HiredisRespSerializer", "PythonRespSerializer")
_installed = False


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
    global _installed
    if _installed:
        return
    for name in _PACKERS:
        cls = getattr(redis_connection, name, None)
        if cls is not None:
            cls.pack = _counting(cls.pack)
    _installed = True


def snapshot() -> Counter[str]:
    return Counter(COUNTS)


def total(counts: Counter[str]) -> int:
    return sum(counts.values())

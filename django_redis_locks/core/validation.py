"""Argument checks shared by every primitive: names, durations and counts."""

from __future__ import annotations

import math
import unicodedata

from .errors import InvalidArgument, InvalidArgumentType

__all__ = [
    "MAX_NAME_BYTES",
    "MAX_TTL_SECONDS",
    "MAX_WAIT_SECONDS",
    "MIN_TTL_SECONDS",
    "check_bool",
    "check_count",
    "check_metric_name",
    "check_name",
    "check_namespace",
    "check_ttl",
    "check_wait",
    "to_millis",
]

#: Longest accepted name, in UTF-8 bytes. Keeps every key under a fixed bound.
MAX_NAME_BYTES = 256
#: Shortest TTL: Redis expiries are whole milliseconds.
MIN_TTL_SECONDS = 0.001
#: Longest TTL (and longest extension): one year. Anything longer is a bug, not a lock.
MAX_TTL_SECONDS = 365 * 24 * 3600.0
#: Longest finite wait for a lock; ``None`` means "wait as long as it takes".
MAX_WAIT_SECONDS = MAX_TTL_SECONDS
#: Longest namespace, in UTF-8 bytes.
MAX_NAMESPACE_BYTES = 64


def check_name(name: object, argument: str = "name") -> str:
    """Return ``name`` if it is a usable lock name, else raise InvalidArgument(Type).

    Accepted: a non-empty ``str`` of at most MAX_NAME_BYTES UTF-8 bytes with no control,
    format or surrogate characters (so names print cleanly in logs and the admin).
    """
    if not isinstance(name, str):
        raise InvalidArgumentType(argument, f"must be a str, not {type(name).__name__}")
    if not name:
        raise InvalidArgument(argument, "must not be empty")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgument(argument, "must be valid Unicode (no lone surrogates)") from None
    if size > MAX_NAME_BYTES:
        raise InvalidArgument(
            argument, f"is {size} bytes in UTF-8; the limit is {MAX_NAME_BYTES} bytes"
        )
    for position, char in enumerate(name):
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            raise InvalidArgument(
                argument,
                f"contains the control character U+{ord(char):04X} at position {position}",
            )
    return name


def check_metric_name(metric_name: object) -> str | None:
    """Return ``metric_name`` (None, or a usable name as for :func:`check_name`): the bounded
    name events carry for aggregation, where the primitive's own name may be unbounded."""
    if metric_name is None:
        return None
    return check_name(metric_name, "metric_name")


def check_namespace(namespace: object) -> str:
    """Return ``namespace`` if it can prefix keys: ASCII letters, digits and ``_-.:``."""
    if not isinstance(namespace, str):
        raise InvalidArgumentType("namespace", f"must be a str, not {type(namespace).__name__}")
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:")
    if not namespace or len(namespace) > MAX_NAMESPACE_BYTES or not set(namespace) <= allowed:
        raise InvalidArgument(
            "namespace",
            f"must be 1 to {MAX_NAMESPACE_BYTES} characters from A-Z a-z 0-9 _ - . : "
            f"(got {namespace!r})",
        )
    return namespace


def _check_seconds(value: object, argument: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentType(
            argument, f"must be a number of seconds (int or float), not {type(value).__name__}"
        )
    seconds = float(value)
    if math.isnan(seconds):
        raise InvalidArgument(argument, "must be a number of seconds, not NaN")
    if math.isinf(seconds):
        raise InvalidArgument(argument, "must be finite")
    return seconds


def check_ttl(value: object, argument: str = "timeout") -> float:
    """Return a TTL in seconds: a finite number from MIN_TTL_SECONDS to MAX_TTL_SECONDS.

    There is no way to ask for a lock without expiry: zero, negative and infinite values fail.
    """
    seconds = _check_seconds(value, argument)
    if seconds < MIN_TTL_SECONDS:
        raise InvalidArgument(
            argument,
            f"must be at least {MIN_TTL_SECONDS} seconds (got {value!r}); every lock has an expiry",
        )
    if seconds > MAX_TTL_SECONDS:
        raise InvalidArgument(
            argument, f"must be at most {MAX_TTL_SECONDS:.0f} seconds (got {value!r})"
        )
    return seconds


def check_wait(value: object, argument: str = "blocking_timeout") -> float | None:
    """Return a wait in seconds (0 .. MAX_WAIT_SECONDS), or None for "no limit"."""
    if value is None:
        return None
    seconds = _check_seconds(value, argument)
    if seconds < 0:
        raise InvalidArgument(argument, f"must not be negative (got {value!r})")
    if seconds > MAX_WAIT_SECONDS:
        raise InvalidArgument(
            argument,
            f"must be at most {MAX_WAIT_SECONDS:.0f} seconds (got {value!r}); "
            "pass None to wait without limit",
        )
    return seconds


def check_bool(value: object, argument: str) -> bool:
    """Return ``value`` if it is True or False (not merely truthy)."""
    if not isinstance(value, bool):
        raise InvalidArgumentType(argument, f"must be True or False, not {value!r}")
    return value


def check_count(count: object, most: int) -> int:
    """How many items a listing returns: an int from 1 to ``most``."""
    if isinstance(count, bool) or not isinstance(count, int):
        raise InvalidArgumentType("count", f"must be an int, not {type(count).__name__}")
    if not 1 <= count <= most:
        raise InvalidArgument("count", f"must be from 1 to {most} (got {count})")
    return count


def to_millis(seconds: float) -> int:
    """Whole milliseconds for Redis, rounded up so that a TTL is never shortened."""
    return max(1, math.ceil(seconds * 1000 - 1e-9))

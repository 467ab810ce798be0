"""Introspection: list live locks and semaphores, look one up, force-release one hold.

Every lock and semaphore is listed in its bucket's registry (see :mod:`.protocol.keys`), which
the scripts keep lazily (an entry outlives its name's keys, so a name in use is listed anew
only every few minutes) and prune; listings skip the free names they meet. A listing walks
the buckets in order, a chunk of buckets per round trip (16 first, then as many as the
density seen so far says will fill the page), then describes the page's entries with one
inspection script per bucket, and reads on while free names left the page short: the first
page of 100 among 10,000 live locks takes two round trips, whatever else the database holds,
and never uses ``KEYS`` or ``SCAN``. Pages come in bucket order, then name order within a
bucket (stable, not alphabetical); follow ``Page.cursor`` for the next one.

Force release is checked against the holder id that a listing showed, so a newer holder of
the same name is never evicted by mistake; the evicted holder's next ``ensure_held()``,
``extend()`` or ``refresh()`` raises ``LockLost``.
"""

from __future__ import annotations

import base64
import binascii
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from .connection.backend import Backend, backend_of
from .errors import InvalidArgument, InvalidArgumentType
from .events import Event, emit, listening
from .info import (
    MAX_WAITERS_SHOWN,
    HolderInfo,
    Page,
    SemaphoreInfo,
    parse_lock,
    parse_semaphore,
)
from .protocol import lock_calls as lock_protocol
from .protocol import semaphore_calls as semaphore_protocol
from .protocol.holder import check_holder_id
from .protocol.keys import BUCKETS, LOCK_KIND, SEMAPHORE_KIND, KeySpace
from .protocol.replies import RELEASED, RELEASED_BEFORE, text
from .protocol.scripting import Call, load
from .runtime.driver import Eval, EvalMany, Operation, drive
from .validation import MAX_NAME_BYTES, check_count, check_name

__all__ = [
    "MAX_PAGE_SIZE",
    "force_release",
    "get_lock",
    "get_semaphore",
    "list_locks",
    "list_semaphores",
    "semaphore_info_steps",
]

logger = logging.getLogger(__name__)

#: Largest page a listing returns.
MAX_PAGE_SIZE = 1000
#: Buckets read in the first round trip of a listing; the rest follow in one more.
_FIRST_CHUNK = 16

T = TypeVar("T")
Kind = Literal["lock", "semaphore"]


def list_locks(
    prefix: str = "",
    *,
    cursor: str | None = None,
    count: int = 100,
    using: str | None = None,
    client: Any = None,
) -> Page[HolderInfo]:
    """Live locks whose name starts with ``prefix``: up to ``count``, then ``Page.cursor``.

    Raises InvalidArgument(Type) for a bad prefix, cursor or count, LockBackendError when
    Redis fails.
    """
    backend = backend_of(using, client)
    return drive(_list(backend, LOCK_KIND, prefix, cursor, count, _describe_locks), backend)


def list_semaphores(
    prefix: str = "",
    *,
    cursor: str | None = None,
    count: int = 100,
    using: str | None = None,
    client: Any = None,
) -> Page[SemaphoreInfo]:
    """Semaphores with holders or waiters whose name starts with ``prefix``; see list_locks."""
    backend = backend_of(using, client)
    return drive(
        _list(backend, SEMAPHORE_KIND, prefix, cursor, count, semaphore_info_steps), backend
    )


def get_lock(name: str, *, using: str | None = None, client: Any = None) -> HolderInfo | None:
    """The current holder of lock ``name``, or None when it is free."""
    name = check_name(name)
    backend = backend_of(using, client)
    return drive(_describe_locks(backend, [name]), backend)[0]


def get_semaphore(
    name: str, *, using: str | None = None, client: Any = None
) -> SemaphoreInfo | None:
    """Semaphore ``name`` with its holders, or None when nobody holds or waits."""
    name = check_name(name)
    backend = backend_of(using, client)
    return drive(semaphore_info_steps(backend, [name]), backend)[0]


def force_release(
    name: str,
    holder_id: str,
    *,
    kind: Kind = "lock",
    by: str | None = None,
    using: str | None = None,
    client: Any = None,
) -> bool:
    """Evict the hold ``holder_id`` (as a listing showed it) of lock or semaphore ``name``.

    Returns True if that hold was released, False if it was no longer there (released,
    expired, or the name is now held by someone else, who is left alone). Waiters are woken
    as by a release. The evicted holder finds out at its next check: ``ensure_held()``,
    ``extend()``, ``refresh()`` and its renewer report ``LockLost``. ``by`` (who forced the
    release) is logged and passed on to event listeners.
    """
    name = check_name(name)
    holder_id = check_holder_id(holder_id)
    backend = backend_of(using, client)
    call: Call
    if kind == "lock":
        call = lock_protocol.release_call(backend.keys.lock(name), holder_id, forced=True)
    elif kind == "semaphore":
        keys = backend.keys.semaphore(name)
        call = semaphore_protocol.release_call(keys, holder_id, forced=True)
    else:
        raise InvalidArgument("kind", f"must be 'lock' or 'semaphore', not {kind!r}")
    # (RELEASED_BEFORE: a resend of this very forced release, whose first reply was lost.)
    released = int(drive(_eval(call), backend)) in (RELEASED, RELEASED_BEFORE)
    if released:
        logger.warning("force_release: %s %r (holder %s) by %s", kind, name, holder_id, by)
        if listening("force_released"):
            emit(Event("force_released", kind, name, holder_id=holder_id, by=by))
    return released


# -- steps (sans I/O) ---------------------------------------------------------------------
def _eval(call: Call) -> Operation[Any]:
    return (yield Eval(call))


Describe = Callable[[Backend, Sequence[str]], Operation[list[T | None]]]


def _list(  # noqa: PLR0917 - private, called from two places
    backend: Backend,
    kind: str,
    prefix: str,
    cursor: str | None,
    count: int,
    describe: Describe[T],
) -> Operation[Page[T]]:
    """Registry entries may name free locks and semaphores (entries are kept lazily, see
    lib/registry.lua): read candidates, describe them, keep the live ones, and read on until
    the page is full or the registry ends, reading more candidates each round."""
    prefix = _check_prefix(prefix)
    count = check_count(count, MAX_PAGE_SIZE)
    position = _decode_cursor(cursor)
    items: list[T] = []
    want = count
    while True:
        found = yield from _candidates(backend, kind, prefix, position, want)
        described = yield from describe(backend, [name for _, name in found])
        for place, item in zip(found, described, strict=True):
            if item is not None:
                items.append(item)
                if len(items) == count:
                    return Page(items=items, cursor=_encode_cursor(*place))
        if len(found) < want:  # the registry ends here
            return Page(items=items, cursor=None)
        position = found[-1]
        want = min(MAX_PAGE_SIZE, want * 2)


def _candidates(
    backend: Backend, kind: str, prefix: str, position: tuple[int, str | None], want: int
) -> Operation[list[tuple[int, str]]]:
    """Up to ``want`` registry entries after ``position`` (bucket, name: None from the
    bucket's start), in bucket then name order, as (bucket, name)."""
    bucket, after = position
    low = f"{kind}:{prefix}".encode()
    high = low + b"\xff"  # no UTF-8 text contains 0xff: above every name with the prefix
    found: list[tuple[int, str]] = []
    chunk = _FIRST_CHUNK
    scanned = seen = 0  # buckets read, entries they returned: the density of the registry
    while bucket < BUCKETS and len(found) < want:
        buckets = range(bucket, min(bucket + chunk, BUCKETS))
        calls = []
        for b in buckets:
            start = b"[" + low
            if b == bucket and after is not None:
                start = b"(" + f"{kind}:{after}".encode()
            registry = backend.keys.registry(b)
            calls.append(
                Call(
                    load("registry_page"),
                    (registry.names, registry.expiry),
                    (start, b"[" + high, want - len(found)),
                )
            )
        pages = yield EvalMany(tuple(calls))
        for b, members in zip(buckets, pages, strict=True):
            seen += len(members)
            for member in members:
                if len(found) < want:
                    found.append((b, text(member).partition(":")[2]))
        scanned += len(buckets)
        bucket, after = buckets.stop, None
        # Read next as many buckets as should fill the rest of the page, with a margin: a
        # sparse registry is read to the end in one more round trip, a dense one in few.
        missing = want - len(found)
        chunk = BUCKETS if seen == 0 else math.ceil(missing * scanned / seen * 1.5) + 1
    return found


def _by_bucket(names: Sequence[str]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for index, name in enumerate(names):
        groups.setdefault(KeySpace.bucket(name), []).append(index)
    return groups


def _describe_locks(backend: Backend, names: Sequence[str]) -> Operation[list[HolderInfo | None]]:
    """One ``lock_inspect`` call per bucket, all in one round trip per server."""
    groups = _by_bucket(names)
    calls = tuple(
        Call(
            load("lock_inspect"),
            tuple(key for i in indexes for key in backend.keys.lock(names[i]).all[:4]),
            (MAX_WAITERS_SHOWN,),
        )
        for indexes in groups.values()
    )
    replies = yield EvalMany(calls)
    result: list[HolderInfo | None] = [None] * len(names)
    for indexes, reply in zip(groups.values(), replies, strict=True):
        now_ms = int(reply[0])
        for index, entry in zip(indexes, reply[1:], strict=True):
            result[index] = parse_lock(names[index], entry, now_ms)
    return result


def semaphore_info_steps(
    backend: Backend, names: Sequence[str]
) -> Operation[list[SemaphoreInfo | None]]:
    """One ``sem_inspect`` call per bucket, all in one round trip per server."""
    groups = _by_bucket(names)
    calls = tuple(
        Call(
            load("sem_inspect"),
            tuple(key for i in indexes for key in backend.keys.semaphore(names[i]).state),
            (MAX_WAITERS_SHOWN,),
        )
        for indexes in groups.values()
    )
    replies = yield EvalMany(calls)
    result: list[SemaphoreInfo | None] = [None] * len(names)
    for indexes, reply in zip(groups.values(), replies, strict=True):
        now_ms = int(reply[0])
        for index, entry in zip(indexes, reply[1:], strict=True):
            result[index] = parse_semaphore(names[index], entry, now_ms)
    return result


# -- arguments ----------------------------------------------------------------------------
def _check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str):
        raise InvalidArgumentType("prefix", f"must be a str, not {type(prefix).__name__}")
    if prefix:
        check_name(prefix, "prefix")
    return prefix


def _encode_cursor(bucket: int, name: str) -> str:
    raw = f"{bucket}:{name}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _decode_cursor(cursor: object) -> tuple[int, str | None]:
    if cursor is None:
        return 0, None
    if not isinstance(cursor, str):
        raise InvalidArgumentType("cursor", f"must be a str or None, not {type(cursor).__name__}")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("utf-8")
        bucket_text, _, name = raw.partition(":")
        bucket = int(bucket_text)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidArgument("cursor", "is not a cursor returned by a listing") from None
    if not 0 <= bucket < BUCKETS or not name or len(name.encode()) > MAX_NAME_BYTES:
        raise InvalidArgument("cursor", "is not a cursor returned by a listing")
    return bucket, name

"""Who holds what: owner identity (thread or asyncio task), hold records and holder metadata.

A lock object may be shared by many threads and tasks. Each of them gets its own hold, keyed
by the *owner*: the running asyncio task if there is one, else the current thread. Holds are
also stamped with the process id, so after ``fork()`` a child never sees its parent's holds.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import secrets
import socket
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidArgument, InvalidArgumentType

__all__ = [
    "HOLDER_ID_LENGTH",
    "MAX_METADATA_BYTES",
    "Hold",
    "check_holder_id",
    "current_owner",
    "holder_id",
    "holder_metadata",
    "metadata_json",
    "new_token",
]

#: Length of a holder id (hex digits).
HOLDER_ID_LENGTH = 16
#: Largest accepted holder metadata, JSON-encoded, in bytes.
MAX_METADATA_BYTES = 4096
_HOST = socket.gethostname()
_HOST_JSON = json.dumps(_HOST)


def new_token() -> str:
    """A fresh random token: 160 bits from ``secrets``, URL-safe text."""
    return secrets.token_urlsafe(20)


def holder_id(token: str) -> str:
    """The public id of a hold: the first 16 hex digits of its token's SHA-1.

    The scripts compute the same id (``redis.sha1hex``) for listings and forced releases,
    so a hold can be shown, logged and named without revealing its token.
    """
    return hashlib.sha1(token.encode("utf-8"), usedforsecurity=False).hexdigest()[:HOLDER_ID_LENGTH]


def check_holder_id(holder_id: object) -> str:
    """Return ``holder_id`` if it looks like one (16 lowercase hex digits)."""
    if not isinstance(holder_id, str):
        raise InvalidArgumentType("holder_id", f"must be a str, not {type(holder_id).__name__}")
    if len(holder_id) != HOLDER_ID_LENGTH or not all(c in "0123456789abcdef" for c in holder_id):
        raise InvalidArgument(
            "holder_id", f"must be {HOLDER_ID_LENGTH} lowercase hex digits (got {holder_id!r})"
        )
    return holder_id


def current_owner() -> threading.Thread | asyncio.Task[Any]:
    """The running asyncio task if any, else the current thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return threading.current_thread()
    task = asyncio.current_task()
    return task if task is not None else threading.current_thread()


def owner_alive(owner: object) -> bool:
    """Whether a thread is alive or a task not yet done."""
    if isinstance(owner, threading.Thread):
        return owner.is_alive()
    if isinstance(owner, asyncio.Task):
        return not owner.done()
    return False


def check_metadata(metadata: object) -> dict[str, Any]:
    """Validate user metadata: a JSON-serialisable mapping with str keys, or None."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidArgumentType(
            "metadata", f"must be a mapping or None, not {type(metadata).__name__}"
        )
    result = dict(metadata)
    if not all(isinstance(key, str) for key in result):
        raise InvalidArgumentType("metadata", "keys must be str")
    try:
        encoded = json.dumps(result, separators=(",", ":"), default=str)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument("metadata", f"must be JSON-serialisable ({exc})") from None
    except RecursionError:
        raise InvalidArgument("metadata", "is nested too deeply to encode as JSON") from None
    if len(encoded.encode("utf-8")) > MAX_METADATA_BYTES:
        raise InvalidArgument("metadata", f"is larger than {MAX_METADATA_BYTES} bytes as JSON")
    return result


def metadata_json(extra: Mapping[str, Any]) -> str:
    """The caller's metadata as the JSON members that ``holder_metadata`` appends ("" if none)."""
    if not extra:
        return ""
    return json.dumps(dict(extra), separators=(",", ":"), default=str)[1:-1]


def holder_metadata(owner: object, extra_json: str) -> str:
    """JSON text describing the holder: host, pid, thread, task, then the caller's metadata
    (``extra_json`` from :func:`metadata_json`; its keys win over ours when they repeat)."""
    thread = threading.current_thread()
    parts = [
        f'"host":{_HOST_JSON},"pid":{os.getpid()}',
        f'"thread":{json.dumps(f"{thread.name} ({thread.ident})")}',
    ]
    if isinstance(owner, asyncio.Task):
        parts.append(f'"task":{json.dumps(owner.get_name())}')
    if extra_json:
        parts.append(extra_json)
    return "{" + ",".join(parts) + "}"


@dataclass(eq=False)
class Hold:
    """One owner's hold on one lock, as this process knows it.

    ``expires_at`` is a conservative local estimate (``time.monotonic()``): the clock was read
    before the request that set the TTL was sent, so Redis expires the key no earlier.
    """

    token: str
    fence: int
    ttl: float
    expires_at: float
    owner: weakref.ref[Any]
    backend: Any  # the Backend the hold was taken on: release and extend go there
    keys: Any  # the primitive's keys on that backend
    pid: int = field(default_factory=os.getpid)
    lost_reason: str | None = None
    on_lost: Callable[[str], None] | None = None
    release_sent: bool = False  # a release was sent; its reply may have been lost
    renewed: bool = False  # handed to the renewer
    _lost_event: threading.Event | None = field(default=None, repr=False)

    @functools.cached_property
    def holder_id(self) -> str:
        return holder_id(self.token)

    @property
    def lost_event(self) -> threading.Event:
        """Set once the hold is known to be lost (made on first use)."""
        if self._lost_event is None:
            self._lost_event = threading.Event()
            if self.lost_reason is not None:
                self._lost_event.set()
        return self._lost_event

    @property
    def lost(self) -> bool:
        return self.lost_reason is not None

    def mark_lost(self, reason: str) -> bool:
        """Record that the hold is gone; returns False if it was already marked."""
        if self.lost_reason is not None:
            return False
        self.lost_reason = reason
        try:
            if self.on_lost is not None:
                self.on_lost(reason)
        finally:
            if self._lost_event is not None:  # after the callback: waiters see its effects
                self._lost_event.set()
        return True

    def local_time_left(self) -> float:
        return self.expires_at - time.monotonic()

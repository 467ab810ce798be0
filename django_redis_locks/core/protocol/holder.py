"""Who a holder is, as Redis and listings see it: its token, public id and metadata.

A token is the secret that proves a hold (160 random bits); the holder id, derived from it,
names the hold in listings, logs and forced releases without revealing the token. The
metadata says where the holder runs (host, pid, thread, task or greenlet) plus the caller's
own fields.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import secrets
import socket
from collections.abc import Mapping
from typing import Any

from django_redis_locks.core.errors import InvalidArgument, InvalidArgumentType
from django_redis_locks.core.runtime.ownership import owner_fields

__all__ = [
    "HOLDER_ID_LENGTH",
    "MAX_METADATA_BYTES",
    "check_holder_id",
    "check_metadata",
    "holder_id",
    "holder_metadata",
    "metadata_json",
    "new_token",
    "with_renewal",
]

#: Length of a holder id (hex digits).
HOLDER_ID_LENGTH = 16
#: Largest accepted holder metadata, JSON-encoded, in bytes.
MAX_METADATA_BYTES = 4096
_HOST_JSON = json.dumps(socket.gethostname())


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


def check_metadata(metadata: object) -> dict[str, Any]:
    """Validate user metadata: a JSON-serialisable mapping with str keys, or None. Numbers
    must be finite (NaN and Infinity have no JSON form); other values are stored as their
    ``str()``."""
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
        # allow_nan=False: NaN and Infinity are not JSON (json.dumps would write them as is).
        encoded = json.dumps(result, separators=(",", ":"), default=str, allow_nan=False)
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
    return json.dumps(dict(extra), separators=(",", ":"), default=str, allow_nan=False)[1:-1]


def with_renewal(extra_json: str, auto_renew: bool, ttl: float | None) -> str:
    """``extra_json`` led by ``"renew"``, for a hold kept with ``auto_renew``: the seconds
    between its renewals (a third of its TTL), or true when the TTL is the configured default
    (not known here). A few bytes, so that listings can tell a renewed hold from one that
    runs out. The caller's own "renew" key, if any, comes later and wins."""
    if not auto_renew:
        return extra_json
    every = "true" if ttl is None else format(max(round(ttl / 3, 1), 0.1), "g")
    return f'"renew":{every},{extra_json}' if extra_json else f'"renew":{every}'


def holder_metadata(owner: object, extra_json: str) -> str:
    """JSON text describing the holder: host, pid, thread, task or greenlet, then the caller's
    metadata (``extra_json`` from :func:`metadata_json`; its keys win when they repeat)."""
    return _metadata(os.getpid(), owner_fields(owner), extra_json)


@functools.lru_cache(maxsize=1024)
def _metadata(pid: int, described: tuple[tuple[str, str], ...], extra_json: str) -> str:
    """(Made once per process, owner and metadata.)"""
    parts = [f'"host":{_HOST_JSON},"pid":{pid}']
    parts.extend(f'"{key}":{json.dumps(value)}' for key, value in described)
    if extra_json:
        parts.append(extra_json)
    return "{" + ",".join(parts) + "}"

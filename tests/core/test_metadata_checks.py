"""Holder metadata is stored as strict JSON, whatever the caller passes: what cannot be
stored so is refused when the lock is made, and what can (control characters included)
is read back as given."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import redis

from django_redis_locks import InvalidArgument, Lock, Semaphore
from django_redis_locks.core import Backend
from django_redis_locks.core.protocol.holder import check_metadata, metadata_json
from django_redis_locks.core.registry import get_lock
from tests.helpers import stored_metadata


def _strict(text: str) -> Any:
    """JSON as the standard has it: NaN and Infinity are not JSON."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    "metadata",
    [
        {"ratio": math.nan},
        {"limit": math.inf},
        {"limit": -math.inf},
        {"nested": {"values": [1.0, math.nan]}},
    ],
    ids=["nan", "inf", "-inf", "nested"],
)
def test_metadata_that_is_not_json_is_refused(backend: Backend, metadata: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument, match="metadata"):
        Lock("nan", client=backend, metadata=metadata)
    with pytest.raises(InvalidArgument, match="metadata"):
        Semaphore("nan", 2, client=backend, metadata=metadata)
    with pytest.raises(InvalidArgument, match="metadata"):
        check_metadata(metadata)


def test_what_is_accepted_is_stored_as_strict_json(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """Control characters in a label (a newline, an escape sequence, NUL) are JSON-escaped
    when stored and come back as given; showing them safely is the reader's job (the
    listing commands escape them for terminals, templates for HTML)."""
    label = "nightly\n\x1b[2J\x00\u202eexport"
    metadata = {"label": label, "ratio": 0.5, "big": 1e308}
    assert _strict("{" + metadata_json(metadata) + "}") == metadata
    lock = Lock("strict-json", client=backend, timeout=10, metadata=metadata)
    with lock:
        raw = stored_metadata(redis_client, lock._keys_for(backend).lock)
        assert isinstance(raw, bytes)
        stored = _strict(raw.decode())
        assert stored["label"] == label
        info = get_lock("strict-json", client=backend)
        assert info is not None and info.label == label


def test_metadata_split_inside_a_character_comes_back_whole(backend: Backend) -> None:
    """A lock hash stores the metadata in pieces of at most 64 bytes (lib/lock.lua), which may
    cut a UTF-8 character in two: the listing puts the pieces together before it decodes."""
    label = "é" * 70 + "✓" * 30  # 2-byte and 3-byte characters across several piece edges
    lock = Lock("pieces", client=backend, timeout=10, metadata={"label": label, "n": 1})
    with lock:
        info = get_lock("pieces", client=backend)
        assert info is not None and info.label == label and info.metadata["n"] == 1


def test_a_lock_hash_written_with_its_metadata_whole_is_still_listed_with_it(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """A hold written before the metadata was stored in pieces (one field, meta, no mn) is
    listed with that metadata; a hold with neither shows empty metadata."""
    key = backend.keys.lock("whole").lock
    now_ms = int(redis_client.time()[0]) * 1000
    fields: dict[Any, Any] = {
        "token": "t" * 27,
        "fence": "1",
        "acquired": now_ms,
        "expires": now_ms + 60_000,
    }
    redis_client.hset(key, mapping={**fields, "meta": '{"label":"written whole","pid":7}'})
    info = get_lock("whole", client=backend)
    assert info is not None and info.label == "written whole" and info.pid == 7
    bare = backend.keys.lock("bare").lock
    redis_client.hset(bare, mapping=fields)
    info = get_lock("bare", client=backend)
    assert info is not None and info.metadata == {}

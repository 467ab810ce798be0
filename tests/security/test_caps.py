"""Denial of service: what one caller can make the library store or ask for stays bounded.

TTLs, waits and semaphore limits are checked in tests/core (test_validation, test_semaphore)
and page sizes in tests/core/test_registry; here: extensions add up to one year at most,
holder metadata stops at exactly 4 KB as JSON, and a management command's recorded command
line stays within its share of that however long and exotic its arguments, so the command
still runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.management import load_command_class

from django_redis_locks import InvalidArgument, Lock, Semaphore
from django_redis_locks.core import Backend
from django_redis_locks.core.protocol.holder import MAX_METADATA_BYTES
from django_redis_locks.core.validation import MAX_TTL_SECONDS
from django_redis_locks.inspection import get_semaphore

YEAR_MS = int(MAX_TTL_SECONDS * 1000)


def test_extensions_add_up_to_one_year_at_most(backend: Backend, redis_client: Any) -> None:
    lock = Lock("long", client=backend, timeout=MAX_TTL_SECONDS - 60)
    assert lock.acquire()
    for _ in range(3):
        assert lock.extend(MAX_TTL_SECONDS) <= MAX_TTL_SECONDS
    key = lock._keys_for(backend).lock
    expires = int(redis_client.hget(key, "expires"))
    seconds, micros = redis_client.time()
    assert expires - (seconds * 1000 + micros // 1000) <= YEAR_MS
    lock.release()


def metadata_of_size(size: int) -> dict[str, str]:
    """A mapping whose compact JSON is exactly ``size`` bytes."""
    overhead = len(json.dumps({"x": ""}, separators=(",", ":")))
    return {"x": "y" * (size - overhead)}


def test_metadata_of_4_kb_is_accepted_and_one_byte_more_refused(backend: Backend) -> None:
    exactly = metadata_of_size(MAX_METADATA_BYTES)
    assert len(json.dumps(exactly, separators=(",", ":"))) == MAX_METADATA_BYTES == 4096
    with Lock("meta", client=backend, timeout=5, metadata=exactly):
        pass
    with pytest.raises(InvalidArgument, match="4096 bytes") as info:
        Lock("meta", client=backend, metadata=metadata_of_size(MAX_METADATA_BYTES + 1))
    assert info.value.argument == "metadata"
    with pytest.raises(InvalidArgument, match="4096 bytes"):  # non-ASCII: 6 bytes a character
        Semaphore("meta", 1, client=backend, metadata={"x": "é" * 700})


@pytest.mark.django_db
@pytest.mark.parametrize(
    "argument",
    [
        pytest.param("\x01" * 64, id="control-characters"),
        pytest.param("商品" * 32, id="non-ascii"),
        pytest.param("\U0001f512" * 64, id="astral"),
        pytest.param('"\\' * 32, id="escaped"),
    ],
)
def test_a_commands_recorded_command_line_never_stops_it_from_running(
    settings: Any, namespace: str, argument: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: 20 arguments of 64 characters that JSON escapes (control, non-ASCII)
    made the slot's metadata larger than 4 KB, and the command exited with status 1
    ("cannot make its semaphore") instead of running."""
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    argv = ["manage.py", "limited"]
    for _ in range(40):
        argv += ["--output", argument]
    command = load_command_class("tests.testapp", "limited")
    seen: dict[str, Any] = {}

    def handle(*args: Any, **options: Any) -> None:
        info = get_semaphore("command:limited")
        assert info is not None
        seen["argv"] = info.holders[0].metadata["argv"]

    command.handle = handle  # type: ignore[method-assign]
    command.run_from_argv(argv)
    recorded = seen["argv"]
    assert recorded[:2] == ["manage.py", "limited"]
    assert recorded[-1].startswith("... (") and recorded[-1].endswith(" more)")
    kept = len(recorded) - 1
    assert recorded[-1] == f"... ({len(argv) - kept} more)"
    assert len(json.dumps(recorded)) <= 2048 + len(recorded[-1]) + 4

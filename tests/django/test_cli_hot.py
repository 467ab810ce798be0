"""``manage.py redis_locks hot``: the most contended names, as text and JSON, in-process and
as a real process."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from django_redis_locks import Lock, Semaphore
from django_redis_locks.management.hot_output import HOT_COLUMNS
from tests.testapp.runner import Manage, manage_processes

pytestmark = pytest.mark.usefixtures("locks_namespace")


@pytest.fixture
def locks_namespace(namespace: str) -> Iterator[str]:
    with override_settings(DJANGO_REDIS_LOCKS={"CACHE_ALIAS": "locks", "NAMESPACE": namespace}):
        yield namespace


def cli(*args: str) -> str:
    stdout = io.StringIO()
    call_command("redis_locks", "hot", *args, stdout=stdout)
    return stdout.getvalue()


@pytest.fixture
def contended() -> None:
    """``invoice:1`` refused three times and waited for once (0.2 s), ``exports`` (a
    semaphore of 1) waited for by one that gave up, ``calm`` used without contention."""
    with Lock("calm", timeout=30):
        pass
    holder = Lock("invoice:1", timeout=30)
    assert holder.acquire()
    for _ in range(3):
        assert not Lock("invoice:1", timeout=30).acquire(blocking=False)
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(_wait_for("invoice:1")))
    waiter.start()
    waiter.join(0.2)
    holder.release()
    waiter.join(10)
    assert got == [True]
    with Semaphore("exports", 1, timeout=30):
        assert not Semaphore("exports", 1, timeout=30).acquire(timeout=0.2)


def _wait_for(name: str) -> bool:
    lock = Lock(name, timeout=30)
    got = lock.acquire(timeout=10)
    lock.release()
    return got


def test_hot_prints_the_most_contended_first(contended: None) -> None:
    out = cli().splitlines()
    assert out[0] == "The most contended over the last 5m:"
    assert out[1].split("  ")[0] == HOT_COLUMNS[0] and "LONGEST HOLD" in out[1]
    rows = [line.split() for line in out[2:]]
    assert [row[:2] for row in rows] == [["lock", "invoice:1"], ["semaphore", "exports"]]
    assert rows[0][2:5] == ["3", "1", "0"]  # refused, waited, gave up
    assert float(rows[0][5].rstrip("s")) >= 0.15  # the mean wait
    assert rows[1][2:5] == ["0", "1", "1"]
    assert rows[1][5] == "-"  # no wait of it ended with the slot


def test_hot_json_window_kind_and_count(contended: None) -> None:
    data = json.loads(cli("--json", "--window", "60m"))
    assert data["window"] == 3600
    first, second = data["hot"]
    assert (first["name"], first["refused"], first["queued"], first["waits"]) == (
        "invoice:1",
        3,
        1,
        1,
    )
    assert first["holds"] == 1 and first["longest_hold"] >= 0.15
    assert (second["name"], second["left"], second["mean_wait"]) == ("exports", 1, None)
    assert second["longest_wait"] is None and second["longest_hold"] is None  # none of either
    only = json.loads(cli("--json", "--kind", "semaphore"))["hot"]
    assert [hot["name"] for hot in only] == ["exports"]
    assert [hot["name"] for hot in json.loads(cli("--json", "--count", "1"))["hot"]] == [
        "invoice:1"
    ]


def test_hot_with_nothing_contended_says_so() -> None:
    with Lock("calm", timeout=30):
        pass
    assert cli() == "Nothing was contended over the last 5m.\n"
    assert json.loads(cli("--json")) == {"window": 300, "hot": []}


def test_hot_errors() -> None:
    with pytest.raises(CommandError, match="count"):
        cli("--count", "0")
    with pytest.raises(CommandError):
        cli("--window", "10m")


@pytest.fixture
def manage(redis_server: Any, namespace: str) -> Iterator[Manage]:
    with manage_processes(redis_server.url, namespace) as manage:
        yield manage


def test_hot_from_the_command_line(contended: None, manage: Manage) -> None:
    done = manage.run("redis_locks", "hot", "--json")
    assert done.returncode == 0, done.stderr
    assert [hot["name"] for hot in json.loads(done.stdout)["hot"]] == ["invoice:1", "exports"]

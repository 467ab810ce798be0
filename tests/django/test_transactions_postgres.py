"""The lost-update race that a hold released before its transaction commits lets through, on
a real PostgreSQL (READ COMMITTED, its default): two processes read-modify-write one row under
the lock, 40 rounds each.

Released when the function returns, the next holder reads the row before the first holder's
transaction committed its write, and writes over it: updates are lost. Released on commit
(``release_on_commit=True``), none is. Each process is ``tests/django/transaction_worker.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.harness.postgres import PostgresServer, postgres_bin

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 40

pytestmark = pytest.mark.skipif(
    postgres_bin() is None, reason="needs PostgreSQL (apt-get install postgresql; .ci/run does)"
)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


@pytest.fixture
def counter(postgres: PostgresServer) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(
        host="127.0.0.1", port=postgres.port, user="postgres", dbname="postgres", autocommit=True
    ) as connection:
        connection.execute("DROP TABLE IF EXISTS counter")
        connection.execute("CREATE TABLE counter (id int PRIMARY KEY, value int NOT NULL)")
        connection.execute("INSERT INTO counter VALUES (1, 0)")
        yield connection


def _env() -> dict[str, str]:
    """A worker's environment: this checkout importable, settings of its own."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def _workers(mode: str, postgres: PostgresServer, redis_url: str, namespace: str) -> None:
    command = [
        sys.executable, "-m", "tests.django.transaction_worker", mode, str(postgres.port),
        redis_url, namespace, str(ROUNDS),
    ]  # fmt: skip
    processes = [
        subprocess.Popen(command, cwd=ROOT, env=_env(), stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for process in processes:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err


def _value(counter: psycopg.Connection[Any]) -> int:
    row = counter.execute("SELECT value FROM counter WHERE id = 1").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.timeout(180)
def test_released_at_return_updates_are_lost(
    postgres: PostgresServer, counter: psycopg.Connection[Any], redis_url: str, namespace: str
) -> None:
    _workers("return", postgres, redis_url, namespace)
    lost = 2 * ROUNDS - _value(counter)
    assert lost > 0, "no update lost: the race did not happen, and the test shows nothing"


@pytest.mark.timeout(180)
def test_released_on_commit_no_update_is_lost(
    postgres: PostgresServer, counter: psycopg.Connection[Any], redis_url: str, namespace: str
) -> None:
    _workers("commit", postgres, redis_url, namespace)
    assert _value(counter) == 2 * ROUNDS


@pytest.mark.timeout(120)
def test_a_connection_closed_inside_its_transaction_releases_the_hold(
    postgres: PostgresServer, counter: psycopg.Connection[Any], redis_url: str, namespace: str
) -> None:
    """Closing the connection rolls the transaction back (Django drops its commit
    callbacks): the hold goes with it, at once."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.django.transaction_worker", "close", str(postgres.port),
         redis_url, namespace, "1"],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"held_before_close": True, "held_after_close": False}
    assert _value(counter) == 0, "the closed transaction's write was committed"

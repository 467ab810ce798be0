"""The hold signals for semaphores, and for force releases of both kinds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_redis_locks import Lock, LockLost, Semaphore
from django_redis_locks.inspection import force_release
from django_redis_locks.signals import (
    hold_acquired,
    hold_contended,
    hold_force_released,
    hold_lost,
    hold_released,
)
from tests.testapp.runner import manage_processes

SIGNALS = {
    "acquired": hold_acquired,
    "released": hold_released,
    "contended": hold_contended,
    "lost": hold_lost,
    "force_released": hold_force_released,
}


@pytest.fixture
def received(settings, namespace: str) -> Iterator[list[tuple[str, Any, dict[str, Any]]]]:
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    seen: list[tuple[str, Any, dict[str, Any]]] = []
    receivers = {}
    for signal_name, signal in SIGNALS.items():

        def receive(sender: Any, _which: str = signal_name, **kwargs: Any) -> None:
            kwargs.pop("signal")
            seen.append((_which, sender, kwargs))

        receivers[signal_name] = receive
        signal.connect(receive)
    yield seen
    for name, signal in SIGNALS.items():
        signal.disconnect(receivers[name])


def test_semaphore_holds_send_their_signals(received) -> None:
    first = Semaphore("pool", 1, timeout=5, metadata={"label": "jobs.import"})
    second = Semaphore("pool", 1, timeout=5, blocking=False)
    assert first.acquire()
    assert not second.acquire()
    holder_id = first.holder_id
    first.release()
    assert [(name, sender) for name, sender, _ in received] == [
        ("acquired", Semaphore),
        ("contended", Semaphore),
        ("released", Semaphore),
    ]
    acquired = received[0][2]
    assert acquired["kind"] == "semaphore" and acquired["name"] == "pool"
    assert acquired["holder_id"] == holder_id and acquired["label"] == "jobs.import"
    assert acquired["fence"] > 0  # the holder's ticket
    assert received[1][2]["holder_id"] is None and 1 <= received[1][2]["retry_after"] < 2
    assert received[2][2]["holder_id"] == holder_id


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_force_release_sends_force_released_then_the_holder_learns_lost(received, kind) -> None:
    primitive = Lock("evict", timeout=5) if kind == "lock" else Semaphore("evict", 2, timeout=5)
    assert primitive.acquire()
    holder_id = primitive.holder_id
    assert holder_id is not None
    assert force_release("evict", holder_id, kind=kind, by="test:operator")
    with pytest.raises(LockLost):
        primitive.ensure_held()
    names = [name for name, _, _ in received]
    assert names == ["acquired", "force_released", "lost"]
    forced = received[1][2]
    assert forced["kind"] == kind and forced["holder_id"] == holder_id
    assert forced["by"] == "test:operator"
    lost = received[2][2]
    assert lost["holder_id"] == holder_id and lost["reason"]


def test_a_receiver_for_one_sender_class_gets_only_its_signals(settings, namespace) -> None:
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    seen: list[str] = []

    def receive(sender: Any, **kwargs: Any) -> None:
        seen.append(kwargs["name"])

    hold_acquired.connect(receive, sender=Semaphore)
    try:
        with Lock("a-lock", timeout=5), Semaphore("a-semaphore", 1, timeout=5):
            pass
    finally:
        hold_acquired.disconnect(receive, sender=Semaphore)
    assert seen == ["a-semaphore"]


def test_an_orm_receiver_of_hold_lost_leaves_no_database_connection_open(
    redis_server: Any, namespace: str, tmp_path: Path
) -> None:
    """A receiver that uses the database runs on the library's callback thread, which closes
    its connections when it has nothing more to do (a real process, a file database)."""
    with manage_processes(redis_server.url, namespace) as manage:
        manage.env["DRL_TEST_DATABASE"] = str(tmp_path / "db.sqlite3")
        done = manage.run("orm_receiver", timeout=30)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {
        "receiver_ran_in": ["drl-callbacks"],
        "connections_opened_in": ["drl-callbacks"],
        "still_open": [False],
    }

"""``manage.py redis_locks``: list, show and release, in-process and as real processes."""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import socket
import subprocess
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from django_redis_locks import Lock, LockLost, Semaphore
from django_redis_locks.inspection import get_lock, get_semaphore
from django_redis_locks.management.commands.redis_locks import operator
from django_redis_locks.management.listing_output import COLUMNS
from django_redis_locks.signals import hold_force_released
from tests.harness.servers import wait_until
from tests.testapp.runner import Manage, finish, manage_processes

pytestmark = pytest.mark.usefixtures("locks_namespace")
P = TypeVar("P", Lock, Semaphore)


@pytest.fixture
def locks_namespace(namespace: str) -> Iterator[str]:
    with override_settings(DJANGO_REDIS_LOCKS={"CACHE_ALIAS": "locks", "NAMESPACE": namespace}):
        yield namespace


@pytest.fixture
def manage(redis_server: Any, namespace: str) -> Iterator[Manage]:
    with manage_processes(redis_server.url, namespace) as manage:
        yield manage


@pytest.fixture
def held() -> Iterator[list[Lock | Semaphore]]:
    """Primitives a test holds; whatever is still held is released afterwards."""
    primitives: list[Lock | Semaphore] = []
    yield primitives
    for primitive in primitives:
        if primitive.holder_id is not None:
            with contextlib.suppress(LockLost):
                primitive.release()


def hold(held: list[Lock | Semaphore], primitive: P) -> P:
    assert primitive.acquire(blocking=False)
    held.append(primitive)
    return primitive


def cli(*args: str, **options: Any) -> str:
    stdout = io.StringIO()
    call_command("redis_locks", *args, stdout=stdout, **options)
    return stdout.getvalue()


def cli_json(*args: str) -> Any:
    return json.loads(cli(*args, "--json"))


def token_of(primitive: Lock | Semaphore) -> str:
    hold = primitive._current_hold()
    assert hold is not None
    return hold.token


@pytest.fixture
def scene(held: list[Lock | Semaphore]) -> dict[str, Lock | Semaphore]:
    """Two order locks, another lock, and a semaphore with two holders of its limit of 3."""
    return {
        "order2": hold(held, Lock("orders:2", timeout=30)),
        "order1": hold(held, Lock("orders:1", timeout=20, metadata={"label": "charge"})),
        "other": hold(held, Lock("reports:daily", timeout=60)),
        "import_a": hold(held, Semaphore("imports", 3, timeout=40, metadata={"label": "a"})),
        "import_b": hold(held, Semaphore("imports", 3, timeout=50, metadata={"label": "b"})),
    }


# -- list ---------------------------------------------------------------------------------
def test_list_prints_an_aligned_table_sorted_by_name(scene: dict[str, Any]) -> None:
    lines = cli("list").splitlines()
    header, rows = lines[0], lines[1:]
    assert header.split("  ")[0] == "KIND"
    starts = [header.index(column) for column in COLUMNS]
    assert starts == sorted(starts)
    # One row per lock and per semaphore holder, by name.
    assert [row.split()[:2] for row in rows] == [
        ["semaphore", "imports"],
        ["semaphore", "imports"],
        ["lock", "orders:1"],
        ["lock", "orders:2"],
        ["lock", "reports:daily"],
    ]
    by_holder = {}
    for row in rows:
        cells = {
            column: row[start:end].strip()
            for column, start, end in zip(COLUMNS, starts, [*starts[1:], None], strict=True)
        }
        by_holder[cells["HOLDER"]] = cells
    order1 = by_holder[scene["order1"].holder_id]
    assert order1["NAME"] == "orders:1"
    assert order1["HOST"] == socket.gethostname()
    assert order1["PID"] == str(os.getpid())
    assert order1["THREAD/TASK"].startswith("MainThread")
    assert order1["LABEL"] == "charge"
    assert order1["FENCE/SLOTS"] == str(scene["order1"].fence)
    assert 18 < float(order1["EXPIRES IN"].rstrip("s")) <= 20
    acquired = datetime.fromisoformat(order1["ACQUIRED AT (UTC)"] + "+00:00")
    assert abs(datetime.now(acquired.tzinfo) - acquired) < timedelta(seconds=10)
    import_a = by_holder[scene["import_a"].holder_id]
    assert (import_a["LABEL"], import_a["FENCE/SLOTS"]) == ("a", "2/3")
    output = "\n".join(lines)
    assert all(token_of(primitive) not in output for primitive in scene.values())


def test_list_json(scene: dict[str, Any]) -> None:
    data = cli_json("list")
    assert set(data) == {"locks", "semaphores"}
    assert [lock["name"] for lock in data["locks"]] == ["orders:1", "orders:2", "reports:daily"]
    order1 = data["locks"][0]
    assert order1["kind"] == "lock"
    assert order1["holder_id"] == scene["order1"].holder_id
    assert order1["fence"] == scene["order1"].fence
    assert (order1["host"], order1["pid"], order1["label"]) == (
        socket.gethostname(),
        os.getpid(),
        "charge",
    )
    assert order1["thread"].startswith("MainThread") and order1["task"] is None
    acquired = datetime.fromisoformat(order1["acquired_at"])
    expires = datetime.fromisoformat(order1["expires_at"])
    assert acquired.utcoffset() == timedelta(0)
    assert timedelta(seconds=19) < expires - acquired <= timedelta(seconds=20)
    assert 18 < order1["ttl"] <= 20
    assert order1["metadata"]["label"] == "charge"
    [imports] = data["semaphores"]
    assert (imports["name"], imports["limit"], imports["count"], imports["waiting"]) == (
        "imports",
        3,
        2,
        0,
    )
    holders = {holder["holder_id"]: holder for holder in imports["holders"]}
    assert set(holders) == {scene["import_a"].holder_id, scene["import_b"].holder_id}
    a = holders[scene["import_a"].holder_id]
    assert (a["kind"], a["label"], a["pid"]) == ("semaphore", "a", os.getpid())
    assert isinstance(a["ticket"], int) and "fence" not in a
    text = json.dumps(data)
    assert all(token_of(primitive) not in text for primitive in scene.values())


def test_list_filters_by_prefix_and_kind(scene: dict[str, Any]) -> None:
    data = cli_json("list", "--prefix", "orders:")
    assert [lock["name"] for lock in data["locks"]] == ["orders:1", "orders:2"]
    assert data["semaphores"] == []
    only_locks = cli_json("list", "--kind", "lock")
    assert set(only_locks) == {"locks"} and len(only_locks["locks"]) == 3
    only_semaphores = cli_json("list", "--kind", "semaphore")
    assert set(only_semaphores) == {"semaphores"}
    assert [s["name"] for s in only_semaphores["semaphores"]] == ["imports"]
    rows = cli("list", "--kind", "semaphore").splitlines()[1:]
    assert {row.split()[0] for row in rows} == {"semaphore"} and len(rows) == 2
    assert cli("list", "--prefix", "nothing:") == (
        "No locks or semaphores are held whose name starts with 'nothing:'.\n"
    )
    assert cli("list", "--kind", "lock", "--prefix", "imports") == (
        "No locks are held whose name starts with 'imports'.\n"
    )


def test_list_follows_the_pages_to_the_end(held: list[Lock | Semaphore]) -> None:
    for index in range(620):  # more than one page of 500
        hold(held, Lock(f"bulk:{index:04d}", timeout=30))
    data = cli_json("list", "--prefix", "bulk:", "--kind", "lock")
    assert [lock["name"] for lock in data["locks"]] == [f"bulk:{i:04d}" for i in range(620)]


def test_list_counts_the_waiters_of_a_semaphore(held: list[Lock | Semaphore]) -> None:
    holder = hold(held, Semaphore("queue", 1))
    got_in: list[bool] = []

    def wait() -> None:
        waiter = Semaphore("queue", 1)
        got_in.append(waiter.acquire(timeout=10))
        waiter.release()

    thread = threading.Thread(target=wait)
    thread.start()

    def queued() -> bool:
        info = get_semaphore("queue")
        return info is not None and info.waiting == 1

    try:
        wait_until(queued, timeout=5, what="a waiter")
        row = cli("list", "--kind", "semaphore").splitlines()[1]
        assert row.split()[-3:] == ["1/1", "+1", "waiting"]
        assert cli_json("show", "queue")["semaphore"]["waiting"] == 1
    finally:
        holder.release()
        thread.join()
    assert got_in == [True]


# -- show ---------------------------------------------------------------------------------
def test_show_a_lock_and_a_semaphore(scene: dict[str, Any], held: list[Any]) -> None:
    text = cli("show", "orders:1")
    assert text.startswith(f"lock 'orders:1', fence {scene['order1'].fence}\n")
    assert f"  holder       {scene['order1'].holder_id}\n" in text
    assert "  label        charge\n" in text
    assert f"  pid          {os.getpid()}\n" in text
    text = cli("show", "imports")
    assert text.startswith("semaphore 'imports': limit 3, 2 held, 0 waiting\n")
    assert scene["import_a"].holder_id in text and scene["import_b"].holder_id in text
    assert "  metadata" not in text  # nothing beyond the standard fields and the label
    # A name that is both a lock and a semaphore shows both.
    hold(held, Lock("imports", timeout=30, metadata={"label": "x", "batch": 7}))
    text = cli("show", "imports")
    assert text.startswith("lock 'imports'")
    assert '  metadata     {"batch": 7}\n' in text
    assert "\n\nsemaphore 'imports': limit 3, 2 held" in text
    data = cli_json("show", "imports")
    assert data["lock"]["metadata"] == {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "thread": data["lock"]["thread"],
        "label": "x",
        "batch": 7,
    }
    assert data["semaphore"]["count"] == 2
    assert cli_json("show", "imports", "--kind", "lock").keys() == {"lock"}
    data = cli_json("show", "orders:2")
    assert data["semaphore"] is None
    assert data["lock"]["holder_id"] == scene["order2"].holder_id


def test_show_errors(scene: dict[str, Any]) -> None:
    with pytest.raises(CommandError, match=r"^No lock or semaphore named 'nope' is held"):
        cli("show", "nope")
    with pytest.raises(CommandError, match=r"^No semaphore named 'orders:1' is held"):
        cli("show", "orders:1", "--kind", "semaphore")
    with pytest.raises(CommandError, match="name: must not be empty"):
        cli("show", "")


# -- release ------------------------------------------------------------------------------
@pytest.fixture
def forced() -> Iterator[list[dict[str, Any]]]:
    """What ``hold_force_released`` receivers got."""
    received: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        received.append({"sender": sender, **kwargs})

    hold_force_released.connect(receiver)
    yield received
    hold_force_released.disconnect(receiver)


def test_release_a_lock(
    scene: dict[str, Any], held: list[Any], forced: list[dict[str, Any]]
) -> None:
    lock = scene["order1"]
    holder_id = lock.holder_id
    assert cli("release", "orders:1", "--yes") == (
        f"Released lock 'orders:1': holder {holder_id} "
        f"(host {socket.gethostname()}, pid {os.getpid()}, charge).\n"
    )
    assert get_lock("orders:1") is None
    with pytest.raises(LockLost):
        lock.ensure_held()
    assert scene["order2"].ensure_held() > 0  # only that one
    [signal] = forced
    assert signal["sender"] is Lock
    assert (signal["kind"], signal["name"], signal["holder_id"]) == ("lock", "orders:1", holder_id)
    assert signal["by"] == operator()
    assert operator().startswith("cli:") and operator().endswith(f"@{socket.gethostname()}")
    # With --holder, only if it is still that holder.
    newer = hold(held, Lock("orders:1", timeout=30))
    assert newer.holder_id is not None and holder_id is not None
    with pytest.raises(CommandError, match=f"is held by {newer.holder_id} .*, not by {holder_id}"):
        cli("release", "orders:1", "--holder", holder_id, "--yes")
    data = cli_json("release", "orders:1", "--holder", newer.holder_id, "--yes")
    assert data["released"] is True
    assert (data["kind"], data["name"], data["holder_id"]) == ("lock", "orders:1", newer.holder_id)
    assert data["by"] == operator() and data["holder"]["fence"] == newer.fence


def test_release_one_semaphore_holder(scene: dict[str, Any], forced: list[dict[str, Any]]) -> None:
    a, b = scene["import_a"], scene["import_b"]
    with pytest.raises(CommandError) as caught:
        cli("release", "imports", "--yes")
    message = str(caught.value)
    assert message.startswith("The semaphore 'imports' has 2 holders: pass --holder with one of")
    assert a.holder_id in message and b.holder_id in message
    holder_id = a.holder_id
    assert cli("release", "imports", "--holder", holder_id, "--yes").startswith(
        f"Released semaphore 'imports': holder {holder_id} "
    )
    with pytest.raises(LockLost):
        a.ensure_held()
    assert b.ensure_held() > 0
    info = get_semaphore("imports")
    assert info is not None and [h.holder_id for h in info.holders] == [b.holder_id]
    [signal] = forced
    assert signal["sender"] is Semaphore
    assert (signal["kind"], signal["holder_id"], signal["by"]) == (
        "semaphore",
        holder_id,
        operator(),
    )
    # One holder left: no --holder needed.
    assert cli_json("release", "imports", "--yes")["holder_id"] == b.holder_id
    assert get_semaphore("imports") is None


def test_release_errors(scene: dict[str, Any], held: list[Any]) -> None:
    with pytest.raises(CommandError, match=r"^Nothing named 'nope' is held \(no lock, no sema"):
        cli("release", "nope", "--yes")
    with pytest.raises(CommandError, match=r"^The lock 'imports' is not held\.$"):
        cli("release", "imports", "--kind", "lock", "--yes")
    with pytest.raises(CommandError, match=r"^The semaphore 'orders:1' has no holders\.$"):
        cli("release", "orders:1", "--kind", "semaphore", "--yes")
    unknown = "0123456789abcdef"
    with pytest.raises(CommandError, match=f"^The semaphore 'imports' has no holder {unknown};"):
        cli("release", "imports", "--holder", unknown, "--yes")
    with pytest.raises(CommandError, match=r"^--holder must be a holder id as listed: 16 lower"):
        cli("release", "imports", "--holder", "not-an-id", "--yes")
    with pytest.raises(CommandError, match="cache alias 'nope' is not in CACHES"):
        cli("release", "orders:1", "--using", "nope", "--yes")
    # Both kinds under one name: --kind (or a --holder of one of them) decides.
    lock = hold(held, Lock("imports", timeout=30))
    assert lock.holder_id is not None
    with pytest.raises(CommandError, match="Both a lock and a semaphore named 'imports' are held"):
        cli("release", "imports", "--yes")
    assert cli_json("release", "imports", "--holder", lock.holder_id, "--yes")["kind"] == "lock"
    info = get_semaphore("imports")
    assert info is not None and info.count == 2  # nothing else was touched


# -- other processes and terminals ---------------------------------------------------------
def start_holder(manage: Manage, gate: Path, *args: str) -> tuple[subprocess.Popen[str], Any]:
    process = manage.start("hold", *args, "--gate", str(gate))
    assert process.stdout is not None
    return process, json.loads(process.stdout.readline())


def test_a_hold_of_another_process_is_listed_and_released(manage: Manage, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    lock_holder, lock_info = start_holder(manage, gate, "nightly", "--label", "nightly job")
    sem_holder, sem_info = start_holder(manage, gate, "workers", "--semaphore", "4")
    data = cli_json("list")
    [lock] = data["locks"]
    assert (lock["name"], lock["holder_id"]) == ("nightly", lock_info["holder_id"])
    assert (lock["pid"], lock["label"]) == (lock_holder.pid, "nightly job")
    [semaphore] = data["semaphores"]
    assert semaphore["holders"][0]["pid"] == sem_holder.pid
    # From the command line, as an operator would.
    done = manage.run("redis_locks", "release", "nightly", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Released lock 'nightly': holder {lock_info['holder_id']} ")
    holder_id = sem_info["holder_id"]
    done = manage.run("redis_locks", "release", "workers", "--holder", holder_id, "--yes", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["holder_id"] == holder_id
    gate.touch()
    # Each holder learns it lost its hold at its next check.
    for process in (lock_holder, sem_holder):
        code, stdout, stderr = finish(process)
        assert code == 0, stderr
        assert json.loads(stdout) == {"ensure_held": "LockLost"}


def test_release_refuses_without_yes_when_stdin_is_not_a_terminal(
    manage: Manage, held: list[Any]
) -> None:
    lock = hold(held, Lock("stuck", timeout=30))
    done = manage.run("redis_locks", "release", "stuck")
    assert done.returncode == 1
    assert done.stderr == (
        "CommandError: Refusing to force-release without confirmation: stdin is not a "
        "terminal. Pass --yes to release anyway.\n"
    )
    assert lock.ensure_held() > 0


def run_on_a_terminal(manage: Manage, answer: str, *argv: str) -> tuple[int, str]:
    """Run ``manage.py <argv>`` on a pseudo-terminal; type ``answer`` at the prompt."""
    master, slave = os.openpty()
    try:
        process = manage.start(*argv, stdin=slave, stdout=slave, stderr=slave)
    finally:
        os.close(slave)
    output = b""
    typed = False
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 30)
            assert ready, f"no output from the command: {output!r}"
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            output += chunk
            if not typed and b"[y/N]" in output:
                os.write(master, answer.encode() + b"\n")
                typed = True
    finally:
        os.close(master)
    return process.wait(timeout=30), output.decode().replace("\r\n", "\n")


def test_release_asks_on_a_terminal(manage: Manage, held: list[Any]) -> None:
    lock = hold(held, Lock("stuck", timeout=30, metadata={"label": "nightly"}))
    code, output = run_on_a_terminal(manage, "n", "redis_locks", "release", "stuck")
    assert code == 1
    assert f"lock 'stuck', holder {lock.holder_id}:\n" in output
    assert "  label        nightly\n" in output
    assert "Release it? [y/N] " in output
    assert "CommandError: Not released." in output
    assert lock.ensure_held() > 0
    code, output = run_on_a_terminal(manage, "y", "redis_locks", "release", "stuck")
    assert code == 0, output
    assert f"Released lock 'stuck': holder {lock.holder_id}" in output
    with pytest.raises(LockLost):
        lock.ensure_held()

"""Unique Django tasks (``@unique_task``): the name taken at enqueue, handed to the worker
that runs the task, given back as each mode says. Each test asks Redis itself (the lock
listing) who holds the name at each point. Real workers (``db_worker``) are in
tests/deploy/test_unique_deployed.py."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from typing import Any

import pytest
import redis
from django.db import transaction

from django_redis_locks import (
    AlreadyQueued,
    InvalidArgument,
    InvalidArgumentType,
    Lock,
    LockBackendError,
    LockNotAcquired,
    unique_task,
)
from django_redis_locks.core import Backend
from django_redis_locks.core.registry import get_lock as registry_get_lock
from django_redis_locks.inspection import get_lock
from django_redis_locks.unique import handing
from tests.django import unique_tasks
from tests.django.unique_tasks import in_thread, run_as_worker, task_enqueued
from tests.harness.acl import namespace_user
from tests.harness.servers import RedisServer, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh(settings: Any, namespace: str) -> None:
    unique_tasks.fresh(settings, namespace)
    unique_tasks.rebuild.get_backend().results.clear()


def holder(name: str) -> Any:
    return get_lock(name)


def test_until_executed_refuses_a_duplicate_from_enqueue_to_the_end_of_the_run() -> None:
    task = unique_tasks.rebuild
    first = task.enqueue(7)
    queued = holder("rebuild:7")
    assert queued is not None and queued.label == "queued: tests.django.unique_tasks.rebuild"
    with pytest.raises(AlreadyQueued, match="rebuild:7' is queued") as refused:
        task.enqueue(7)
    assert refused.value.task_id == str(first.id)
    assert len(task.get_backend().results) == 1  # nothing more was enqueued
    found = task.find(7)
    assert found is not None and found.phase == "queued" and found.task_id == str(first.id)
    assert found.result.id == first.id
    assert task.find(8) is None
    assert task.enqueue(8).args == [8]  # other arguments, another name

    assert run_as_worker(first) == "rebuilt 7"
    assert unique_tasks.runs == ["rebuild 7"]
    assert holder("rebuild:7") is None  # given back when the run ended
    again = task.enqueue(7)
    assert again.id != first.id


def test_the_worker_holds_the_name_under_its_task_id_while_it_runs() -> None:
    task = unique_tasks.paused
    queued = task.enqueue(1)
    queued_fence = holder("paused:1").fence
    thread, out = in_thread(lambda: run_as_worker(queued))
    assert unique_tasks.inside.wait(10)
    running = holder("paused:1")
    assert running is not None
    assert running.django_task_id == str(queued.id)  # the task id is the holder
    assert running.django_task_name == "tests.django.unique_tasks.paused"
    assert running.fence > queued_fence
    with pytest.raises(AlreadyQueued, match="is running") as refused:
        task.enqueue(1)
    assert refused.value.task_id == str(queued.id)
    found = task.find(1)
    assert found is not None and found.phase == "running" and found.task_id == str(queued.id)
    # The same task delivered twice (a redelivery) finds the name taken: it does not run.
    with pytest.raises(LockNotAcquired, match="held by another run"):
        run_as_worker(queued)
    unique_tasks.proceed.set()
    thread.join(20)
    assert out == ["done 1"]
    assert holder("paused:1") is None


def test_a_failed_run_gives_the_name_back() -> None:
    task = unique_tasks.rebuild
    queued = task.enqueue(3)

    def broken(report_id: int) -> str:
        raise RuntimeError("the job failed")

    original = task.func
    object.__setattr__(task, "func", broken)
    try:
        with pytest.raises(RuntimeError, match="the job failed"):
            run_as_worker(queued)
    finally:
        object.__setattr__(task, "func", original)
    assert holder("rebuild:3") is None
    task.enqueue(3)


def test_until_executing_gives_the_name_back_when_the_worker_starts() -> None:
    task = unique_tasks.notify
    first = task.enqueue(5)
    skipped = task.enqueue(5)  # on_conflict="skip": the task already queued
    assert skipped is not None and skipped.id == first.id
    assert len(task.get_backend().results) == 1
    thread, out = in_thread(lambda: run_as_worker(first))
    assert unique_tasks.inside.wait(10)
    assert holder("notify:5") is None  # running, but no longer queued: a new one may queue
    second = task.enqueue(5)
    assert second.id != first.id
    unique_tasks.proceed.set()
    thread.join(20)
    assert out == ["sent"]


def test_until_expired_keeps_the_name_after_the_run_until_it_expires() -> None:
    task = unique_tasks.digest
    queued = task.enqueue("monday")
    assert run_as_worker(queued) == "digested"
    assert holder("digest:monday") is not None  # kept after the run
    with pytest.raises(AlreadyQueued):
        task.enqueue("monday")
    wait_until(lambda: holder("digest:monday") is None, timeout=5, what="expired")
    task.enqueue("monday")


def test_while_executing_takes_the_name_only_while_it_runs() -> None:
    task = unique_tasks.sync_account
    first = task.enqueue("acme")
    second = task.enqueue("acme")  # nothing taken at enqueue
    assert holder("sync:acme") is None
    with Lock("sync:acme", timeout=10):
        assert run_as_worker(first) == "busy"  # on_contention="skip": skip_result
    assert run_as_worker(second) == "synced"
    assert unique_tasks.runs == ["sync acme"]


def test_a_task_that_takes_its_context_is_held_under_its_id() -> None:
    task = unique_tasks.export
    queued = task.enqueue(9)
    with pytest.raises(AlreadyQueued):
        task.enqueue(9)
    assert run_as_worker(queued) == "exported"
    assert unique_tasks.runs == [f"export 9 {queued.id}"]
    assert holder("export:9") is None


def test_a_task_queued_longer_than_its_queued_timeout_frees_the_name() -> None:
    """Its worker, later, finds the next task's record: it does not take that one's hold,
    and (the name being taken) does not run."""
    task = unique_tasks.export
    stale = task.enqueue(4)
    wait_until(lambda: holder("export:4") is None, timeout=5, what="the queued hold expired")
    fresh = task.enqueue(4)
    with pytest.raises(LockNotAcquired):
        run_as_worker(stale)
    assert holder("export:4").label == "queued: tests.django.unique_tasks.export"
    assert run_as_worker(fresh) == "exported"
    assert unique_tasks.runs == [f"export 4 {fresh.id}"]


def test_an_enqueue_that_fails_gives_the_name_back(monkeypatch: pytest.MonkeyPatch) -> None:
    task = unique_tasks.rebuild
    backend: Any = task.get_backend()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("the queue is down")

    monkeypatch.setattr(backend, "enqueue", refuse)
    with pytest.raises(ConnectionError):
        task.enqueue(11)
    assert holder("rebuild:11") is None
    monkeypatch.undo()
    task.enqueue(11)


def test_an_asyncio_enqueue_is_unique_too() -> None:
    task = unique_tasks.rebuild

    async def enqueue_twice() -> tuple[Any, BaseException | None]:
        first = await task.aenqueue(31)
        try:
            await task.aenqueue(31)
        except AlreadyQueued as error:
            return first, error
        return first, None

    first, refused = asyncio.run(enqueue_twice())
    assert isinstance(refused, AlreadyQueued) and refused.task_id == str(first.id)
    assert run_as_worker(first) == "rebuilt 31"


def test_the_immediate_backend_runs_it_at_enqueue_under_the_name() -> None:
    result = unique_tasks.instant.enqueue(21)
    assert result.return_value == 42
    assert unique_tasks.runs == ["instant 21"]
    assert holder("instant:21") is None


def test_an_enqueue_on_commit_takes_the_name_now_and_enqueues_at_the_commit() -> None:
    task = unique_tasks.rebuild
    results = task.get_backend().results
    with transaction.atomic():
        assert task.enqueue_on_commit(12) is None
        assert holder("rebuild:12") is not None  # taken now
        assert results == []  # enqueued only at the commit
        with pytest.raises(AlreadyQueued):
            task.enqueue(12)
    [queued] = results
    assert holder("rebuild:12") is not None and task.find(12).task_id == str(queued.id)
    assert run_as_worker(queued) == "rebuilt 12"
    assert holder("rebuild:12") is None


def test_an_enqueue_on_commit_rolled_back_gives_the_name_back() -> None:
    task = unique_tasks.rebuild
    with pytest.raises(RuntimeError), transaction.atomic():
        task.enqueue_on_commit(13)
        assert holder("rebuild:13") is not None
        raise RuntimeError("rolled back")
    wait_until(lambda: holder("rebuild:13") is None, timeout=5, what="given back")
    assert task.get_backend().results == []
    enqueued = task.enqueue_on_commit(13)  # outside a transaction: enqueued at once
    assert [r.id for r in task.get_backend().results] == [enqueued.id]
    skipped = unique_tasks.notify  # on_conflict="skip": outside, the existing task's result
    first = skipped.enqueue_on_commit(13)
    assert skipped.enqueue_on_commit(13).id == first.id


def test_the_queued_hold_waiting_for_a_long_commit_is_renewed() -> None:
    task = unique_tasks.digest  # queued_timeout=1 s: renewed while the transaction runs
    with transaction.atomic():
        task.enqueue_on_commit("long")
        time.sleep(2.5)
        assert holder("digest:long") is not None
    assert holder("digest:long") is not None  # handed off at the commit, for 1 s


def test_bad_arguments_are_refused_when_decorating() -> None:
    for options, error, match in (
        ({"mode": "until_done"}, InvalidArgument, "mode"),
        ({"on_conflict": "wait"}, InvalidArgument, "on_conflict"),
        ({"on_contention": "retry"}, InvalidArgument, "on_contention"),
        ({"queued_timeout": 0}, InvalidArgument, "queued_timeout"),
        ({"timeout": -1}, InvalidArgument, "timeout"),
        ({"database": "nowhere"}, InvalidArgument, "database"),
        ({"mode": "while_executing", "on_conflict": "skip"}, InvalidArgument, "no effect"),
        ({"mode": "while_executing", "queued_timeout": 5}, InvalidArgument, "queued_timeout"),
        ({"mode": "until_expired", "timeout": 5}, InvalidArgument, "timeout"),
        ({"mode": "until_expired", "on_contention": "skip"}, InvalidArgument, "on_contention"),
        ({"mode": "until_executing", "skip_result": 0}, InvalidArgument, "skip_result"),
    ):
        with pytest.raises(error, match=match):
            unique_task("x:{n}", **options)
    with pytest.raises(InvalidArgumentType, match="key"):
        unique_task("")
    with pytest.raises(InvalidArgumentType, match="above @task"):
        unique_task("x")(lambda: None)
    with pytest.raises(InvalidArgument, match="names no parameter"):
        unique_task("x:{missing}")(unique_tasks.rebuild)


def test_a_name_force_released_before_the_commit_is_taken_anew_at_the_commit() -> None:
    from django_redis_locks.inspection import force_release

    task = unique_tasks.rebuild
    with transaction.atomic():
        task.enqueue_on_commit(14)
        taken = holder("rebuild:14")
        assert taken is not None
        assert force_release("rebuild:14", taken.holder_id)
    [queued] = task.get_backend().results  # enqueued all the same, under a name of its own
    assert holder("rebuild:14") is not None and task.find(14).task_id == str(queued.id)


def test_a_hold_that_cannot_be_handed_off_is_given_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """(A hold whose acquire went out twice cannot be handed off while a late copy of it may
    land.) The enqueue fails, and the name is not left taken for its queued timeout."""
    from django_redis_locks import LockBackendError
    from django_redis_locks.unique import handing

    def refuse(lock: Any) -> str:
        raise LockBackendError("a late copy of its acquire may still land")

    monkeypatch.setattr(handing, "hand_off", refuse)
    with pytest.raises(LockBackendError):
        unique_tasks.rebuild.enqueue(15)
    assert holder("rebuild:15") is None
    assert unique_tasks.rebuild.get_backend().results == []


def test_a_tuple_argument_names_the_task_as_the_worker_gets_it_back() -> None:
    """A queue hands the arguments back as JSON, a tuple as a list: the enqueue names the
    task the way the worker will (else the worker ran under another name, and the queued
    hold kept the name for queued_timeout after the run)."""
    task = unique_tasks.pair
    queued = task.enqueue((1, 2))
    with pytest.raises(AlreadyQueued):
        task.enqueue([1, 2])
    for items in ((1, 2), [1, 2]):
        found = task.find(items)
        assert found is not None and found.task_id == str(queued.id)
    delivered = dataclasses.replace(queued, args=[[1, 2]])  # as the queue gives it back
    assert run_as_worker(delivered) == "paired"
    assert task.find((1, 2)) is None and task.find([1, 2]) is None
    assert unique_tasks.runs == ["pair [1, 2]"]
    # Bytes come back as text, a mapping's keys as JSON text (from the database backend).
    sent = (b"ab", {1: (2, 3), None: "x"})
    queued = task.enqueue(sent)
    delivered = dataclasses.replace(queued, args=[["ab", {"1": [2, 3], "null": "x"}]])
    found = task.find(sent)
    assert found is not None and found.task_id == str(queued.id)
    assert run_as_worker(delivered) == "paired"
    assert task.find(sent) is None


def test_while_executing_names_the_running_task_in_find_and_the_listing() -> None:
    task = unique_tasks.mirror
    queued = task.enqueue("acme")  # nothing taken at enqueue
    assert task.find("acme") is None
    thread, out = in_thread(lambda: run_as_worker(queued))
    assert unique_tasks.inside.wait(10)
    found = task.find("acme")
    assert found is not None and (found.phase, found.task_id) == ("running", str(queued.id))
    assert found.holder.django_task_id == str(queued.id)
    with pytest.raises(LockNotAcquired):  # another run meanwhile
        run_as_worker(task.enqueue("acme"))
    unique_tasks.proceed.set()
    thread.join(20)
    assert out == ["mirrored acme"]
    assert task.find("acme") is None


def test_an_enqueue_that_returns_late_leaves_a_newer_tasks_record_alone() -> None:
    """Between the backend's enqueue and the record's task id, the task ran to its end and
    a newer enqueue took the name: the late write of the older id must not replace the
    newer task's record (else the newer task could not take its hold over)."""
    task = unique_tasks.rebuild
    newer: list[Any] = []

    def meanwhile(sender: Any, task_result: Any, **kwargs: Any) -> None:
        if newer or task_result.task.module_path != task.module_path:
            return
        newer.append(None)
        run_as_worker(task_result)  # a fast worker: the task ran, the name is free
        newer[0] = task.enqueue(3)  # a newer enqueue takes it

    task_enqueued.connect(meanwhile)
    try:
        first = task.enqueue(3)
    finally:
        task_enqueued.disconnect(meanwhile)
    assert newer[0] is not None and newer[0].id != first.id
    found = task.find(3)
    assert found is not None and found.task_id == str(newer[0].id)
    assert run_as_worker(newer[0]) == "rebuilt 3"
    assert unique_tasks.runs == ["rebuild 3", "rebuild 3"]
    assert holder("rebuild:3") is None


def test_a_ticket_record_that_cannot_be_written_gives_the_name_back() -> None:
    """Redis refuses the record right after the hand-off (here: a user without SET, as a
    failover or a timeout could refuse it): LockBackendError, nothing enqueued, and the
    name is free again (it stayed taken for queued_timeout, naming no task)."""
    user = namespace_user("drl", secrets.token_hex(8))  # the rule without the addition
    with RedisServer(acl_user=user) as server, redis.Redis.from_url(server.url) as client:
        backend = Backend(client, namespace="drl")
        lock = Lock("rebuild:9", client=backend, timeout=60, auto_renew=False)
        assert lock.acquire(blocking=False)
        sent: list[str] = []
        spec = unique_tasks.rebuild.uniqueness
        with pytest.raises(LockBackendError, match=r"NOPERM|permission"):
            handing.enqueue_holding(lock, spec, lambda: sent.append("sent"))
        assert sent == []
        assert get_lock("rebuild:9", client=backend) is None


def test_a_reschedule_cleanup_that_fails_gives_the_name_back() -> None:
    """An enqueue that reschedules takes any rerun asked before it (GETDEL) once it has the
    name: if Redis refuses that (here: a user without GETDEL), LockBackendError, and the
    name is free again."""
    user = namespace_user("drl", secrets.token_hex(8))
    user = dataclasses.replace(user, commands=(*user.commands, "get", "set"))
    with RedisServer(acl_user=user) as server, redis.Redis.from_url(server.url) as client:
        backend = Backend(client, namespace="drl")
        lock = Lock("refresh:9", client=backend, timeout=60, auto_renew=False)
        sent: list[str] = []
        spec = unique_tasks.refresh.uniqueness
        with pytest.raises(LockBackendError, match=r"NOPERM|permission"):
            handing.enqueue(spec, lock, lambda: sent.append("sent"), "refresh", lambda _: None)
        assert sent == []
        assert get_lock("refresh:9", client=backend) is None


def test_an_enqueue_that_finds_the_name_freed_as_it_looks_takes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hold it could not take expired (a killed worker's) before it looked who holds
    it: the enqueue takes the name, instead of refusing with AlreadyQueued naming nobody."""
    task = unique_tasks.rebuild
    dead = Lock("rebuild:21", timeout=5, auto_renew=False)
    assert dead.acquire(blocking=False)
    look = registry_get_lock

    def freed_then_look(name: str, **kwargs: Any) -> Any:
        dead.release()  # (as its TTL running out would)
        monkeypatch.setattr(handing, "get_lock", look)
        return look(name, **kwargs)

    monkeypatch.setattr(handing, "get_lock", freed_then_look)
    queued = task.enqueue(21)
    found = task.find(21)
    assert found is not None and found.task_id == str(queued.id)

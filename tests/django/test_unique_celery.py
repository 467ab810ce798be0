"""Celery's unique tasks (``base=UniqueTask``), eager: ``apply`` runs the task in the calling
thread, as a worker's child would, with the task id given. A broker's second delivery of a
task (``acks_late`` after a lost worker, a visibility timeout) is played by a second
``apply`` with the same task id. Real prefork workers are in
tests/deploy/test_unique_celery_deployed.py."""

from __future__ import annotations

import datetime
import time
from typing import Any

import kombu.utils.json
import pytest

from django_redis_locks import AlreadyQueued, InvalidArgument, Lock
from django_redis_locks.inspection import get_lock
from tests.django import unique_tasks
from tests.django.decorated_tasks import celery_app
from tests.django.unique_tasks import in_thread
from tests.harness.servers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh(settings: Any, namespace: str) -> None:
    unique_tasks.fresh(settings, namespace)


def holder(name: str) -> Any:
    return get_lock(name)


def test_a_celery_task_is_unique_while_it_runs_and_free_after() -> None:
    from celery.result import EagerResult

    task = unique_tasks.celery_rebuild
    thread, out = in_thread(lambda: task.delay(5))
    assert unique_tasks.inside.wait(10)
    running = holder("celery-rebuild:5")
    assert running is not None and running.celery_task_name == task.name
    assert running.celery_task_id is not None
    with pytest.raises(AlreadyQueued, match="is running") as refused:
        task.delay(5)
    assert refused.value.task_id == running.celery_task_id
    found = task.find(5)
    assert found is not None and found.phase == "running"
    assert found.result.id == running.celery_task_id
    unique_tasks.proceed.set()
    thread.join(20)
    [result] = out
    assert isinstance(result, EagerResult) and result.get() == "rebuilt 5"
    assert result.id == running.celery_task_id
    assert holder("celery-rebuild:5") is None
    assert unique_tasks.runs == ["celery-rebuild 5"]


def test_a_celery_task_that_retries_runs_again_and_gives_the_name_back_at_the_end() -> None:
    """Eager, the retry runs inside the first run (Celery's apply); with a worker, the
    retry's message takes the hold with it (tests/deploy)."""
    from tests.django.decorated_tasks import celery_app

    unique_tasks.tries.clear()
    celery_app.conf.task_eager_propagates = False  # (else Celery raises the Retry)
    try:
        result = unique_tasks.celery_flaky.delay("nightly")
    finally:
        celery_app.conf.task_eager_propagates = True
    assert result.get() == "nightly after 2 tries"
    assert unique_tasks.tries["nightly"] == 2
    assert holder("celery-flaky:nightly") is None


def test_celery_unique_options_are_checked_when_the_task_is_made() -> None:
    from celery import shared_task

    from django_redis_locks.unique.celery_tasks import UniqueTask

    with pytest.raises(InvalidArgument, match="mode"):

        @shared_task(base=UniqueTask, unique={"key": "x:{n}", "mode": "sometimes"})
        def bad_mode(n: int) -> None: ...

        bad_mode.name  # noqa: B018  (a shared task is made on first use)
    with pytest.raises(InvalidArgument, match="names no parameter"):

        @shared_task(base=UniqueTask, unique={"key": "x:{missing}"})
        def bad_key(n: int) -> None: ...

        bad_key.name  # noqa: B018
    with pytest.raises(InvalidArgument, match="Django's tasks only"):

        @shared_task(base=UniqueTask, unique={"key": "x:{n}", "database": "default"})
        def bad_database(n: int) -> None: ...

        bad_database.name  # noqa: B018


def test_a_celery_task_sent_to_the_broker_is_found_queued_until_a_worker_runs_it() -> None:
    task = unique_tasks.celery_rebuild
    conf = celery_app.conf
    saved = conf.task_always_eager, conf.broker_url
    conf.task_always_eager, conf.broker_url = False, "memory://"  # sent: nobody runs it
    try:
        sent = task.delay(9)
        queued = holder("celery-rebuild:9")
        assert queued is not None and queued.celery_task_id == sent.id
        found = task.find(9)
        assert found is not None and (found.phase, found.task_id) == ("queued", sent.id)
        with pytest.raises(AlreadyQueued, match="is queued") as refused:
            task.delay(9)
        assert refused.value.task_id == sent.id
    finally:
        conf.task_always_eager, conf.broker_url = saved
    # The worker's run of that message takes the queued hold over.
    unique_tasks.proceed.set()
    assert task.apply((9,), task_id=sent.id).get() == "rebuilt 9"
    assert unique_tasks.runs == ["celery-rebuild 9"]
    assert holder("celery-rebuild:9") is None


def _lost_run(task: Any, name: str, task_id: str, ttl: float) -> Lock:
    """A hold such as a run of ``task_id`` leaves when its worker dies: not renewed."""
    lock = Lock(
        name,
        timeout=ttl,
        auto_renew=False,
        metadata={"celery_task": task.name, "celery_task_id": task_id},
    )
    assert lock.acquire(blocking=False)
    return lock


def test_a_second_delivery_of_a_task_whose_run_was_lost_waits_for_that_hold_then_runs() -> None:
    task = unique_tasks.celery_report
    _lost_run(task, "celery-report:1", "lost-1", ttl=1.0)
    unique_tasks.proceed.set()
    began = time.monotonic()
    result = task.apply((1,), task_id="lost-1")
    waited = time.monotonic() - began
    assert result.get() == "reported 1"
    assert 0.5 <= waited <= 3.0, waited  # until the lost hold expired (TTL 1 s)
    assert unique_tasks.runs == ["celery-report 1"]
    assert holder("celery-report:1") is None


def test_a_second_delivery_while_the_first_runs_is_ignored_and_runs_nothing() -> None:
    task = unique_tasks.celery_report
    thread, out = in_thread(lambda: task.apply((2,), task_id="twice-2"))
    assert unique_tasks.inside.wait(10)
    first = holder("celery-report:2")
    began = time.monotonic()
    again = task.apply((2,), task_id="twice-2")  # waits past the TTL: the first renews it
    assert again.state == "IGNORED"
    assert time.monotonic() - began >= 1.0
    assert holder("celery-report:2").holder_id == first.holder_id
    unique_tasks.proceed.set()
    thread.join(20)
    assert out[0].get() == "reported 2"
    assert unique_tasks.runs == ["celery-report 2"]


def test_a_second_delivery_after_the_first_run_ended_is_ignored() -> None:
    task = unique_tasks.celery_report
    thread, out = in_thread(lambda: task.apply((3,), task_id="ended-3"))
    assert unique_tasks.inside.wait(10)
    waiting, late = in_thread(lambda: task.apply((3,), task_id="ended-3"))
    wait_until(lambda: holder("celery-report:3").waiting == 1, timeout=10, what="a waiter")
    unique_tasks.proceed.set()  # the first run ends while the second delivery waits
    thread.join(20)
    waiting.join(20)
    assert out[0].get() == "reported 3"
    assert late[0].state == "IGNORED"
    # Delivered once more after the name was given back: ignored too.
    assert task.apply((3,), task_id="ended-3").state == "IGNORED"
    assert unique_tasks.runs == ["celery-report 3"]
    assert holder("celery-report:3") is None
    # Another task with these arguments runs.
    assert task.apply((3,), task_id="next-3").get() == "reported 3"


def test_a_delivery_of_another_task_while_the_name_is_held_is_contended() -> None:
    task = unique_tasks.celery_report
    _lost_run(task, "celery-report:4", "other-4", ttl=5.0)
    began = time.monotonic()
    with pytest.raises(Exception, match="held by another run"):
        task.apply((4,), task_id="mine-4").get()
    assert time.monotonic() - began < 1.0  # no wait: the hold is another task's


def test_a_tuple_argument_names_the_task_as_the_worker_gets_it_back() -> None:
    """Celery's JSON messages give a tuple back as a list: the enqueue and the worker name
    the task alike."""
    task = unique_tasks.celery_pair
    conf = celery_app.conf
    saved = conf.task_always_eager, conf.broker_url
    conf.task_always_eager, conf.broker_url = False, "memory://"  # sent: nobody runs it
    try:
        sent = task.delay((1, 2))
    finally:
        conf.task_always_eager, conf.broker_url = saved
    found = task.find([1, 2])
    assert found is not None and found.task_id == sent.id
    assert task.apply(([1, 2],), task_id=sent.id).get() == "paired"  # as the worker gets it
    assert task.find((1, 2)) is None and task.find([1, 2]) is None
    # Beside a value JSON cannot hold (Celery's JSON gives a datetime back as one).
    items = ((1, 2), datetime.datetime(2026, 1, 2, 3, 4, 5), b"ab")
    conf.task_always_eager, conf.broker_url = False, "memory://"
    try:
        sent = task.delay(items)
    finally:
        conf.task_always_eager, conf.broker_url = saved
    delivered = kombu.utils.json.loads(kombu.utils.json.dumps([items]))
    assert task.apply(delivered, task_id=sent.id).get() == "paired"
    assert task.find(items) is None

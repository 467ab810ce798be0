"""``on_conflict="reschedule"``: an enqueue that finds the task queued returns it (that task
runs after the enqueue); one that finds it running asks the run for a rerun, and the run
enqueues its task once more when it ends, however many enqueues asked meanwhile. Django's
tasks (the deferred backend: the test plays the worker) and Celery's (eager)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from django_redis_locks import InvalidArgument, Lock, unique_task
from django_redis_locks.connection import get_backend
from django_redis_locks.inspection import get_lock
from django_redis_locks.unique import records
from tests.django import unique_tasks
from tests.django.unique_tasks import in_thread, run_as_worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh(settings: Any, namespace: str) -> None:
    unique_tasks.fresh(settings, namespace)
    unique_tasks.refresh.get_backend().results.clear()


def enqueued() -> list[Any]:
    return list(unique_tasks.refresh.get_backend().results)


def test_a_task_asked_again_while_queued_is_not_enqueued_twice() -> None:
    task = unique_tasks.refresh
    first = task.enqueue("home")
    again = task.enqueue("home")
    assert again is not None and again.id == first.id
    assert [r.id for r in enqueued()] == [first.id]
    unique_tasks.proceed.set()
    assert run_as_worker(first) == "refreshed home"
    assert len(enqueued()) == 1, "a rerun was enqueued for a request the queued task served"
    assert get_lock("refresh:home") is None


def asking(ask: Any) -> tuple[Any, list[Any]]:
    """A thread that calls ``ask()`` while the task runs, then lets the run end (the
    worker's run stays in the test's thread: Django's task backends are per thread)."""

    def then_end() -> Any:
        assert unique_tasks.inside.wait(10)
        try:
            return ask()
        finally:
            unique_tasks.proceed.set()

    return in_thread(then_end)


def test_a_task_asked_again_while_it_runs_runs_once_more_after() -> None:
    task = unique_tasks.refresh
    first = task.enqueue("home")
    thread, asked = asking(lambda: ([task.enqueue("home") for _ in range(3)], enqueued()))
    assert run_as_worker(first) == "refreshed home"
    thread.join(20)
    [(results, sent)] = asked
    # Nothing enqueued (the deferred backend is per thread: that thread's cannot show the
    # first task either, so each enqueue returned None as its handle).
    assert results == [None] * 3 and sent == []
    # Its run ended: the task is enqueued once more, and holds the name as a queued task.
    [_, rerun] = enqueued()
    found = task.find("home")
    assert found is not None and (found.phase, found.task_id) == ("queued", str(rerun.id))
    assert run_as_worker(rerun) == "refreshed home"
    assert unique_tasks.runs == ["refresh home", "refresh home"]
    assert len(enqueued()) == 2, "the rerun ran again"
    assert get_lock("refresh:home") is None


def test_a_rerun_asked_as_the_run_ends_is_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run gives its hold back between the enqueue's request and its look at the hold:
    the enqueue takes its request back and enqueues the task itself."""
    task = unique_tasks.refresh
    running = Lock("refresh:home", timeout=5, metadata={"django_task_id": "r1"})
    assert running.acquire(blocking=False)
    ask = records.ask_rerun

    def ask_then_end(*args: Any) -> None:
        ask(*args)
        running.release()  # the run ends before it looks for requests
        monkeypatch.setattr(records, "ask_rerun", ask)

    monkeypatch.setattr(records, "ask_rerun", ask_then_end)
    result = task.enqueue("home")
    assert [r.id for r in enqueued()] == [result.id]
    assert not records.take_rerun(running.backend, "refresh:home"), "the request was left"
    queued = get_lock("refresh:home")
    assert queued is not None and queued.label == "queued: tests.django.unique_tasks.refresh"


def test_a_rerun_asked_at_a_commit_is_asked_only_if_it_commits() -> None:
    task = unique_tasks.refresh
    first = task.enqueue("home")

    def ask() -> None:
        with transaction.atomic():
            task.enqueue_on_commit("home")
            transaction.set_rollback(True)
        assert not records.take_rerun(get_backend(), "refresh:home")
        with transaction.atomic():
            task.enqueue_on_commit("home")

    thread, asked = asking(ask)
    assert run_as_worker(first) == "refreshed home"
    thread.join(20)
    assert asked == [None]
    assert len(enqueued()) == 2  # the first and one rerun: the committed request


def test_reschedule_needs_a_mode_that_holds_the_name_from_the_enqueue() -> None:
    for mode in ("until_expired", "while_executing"):
        with pytest.raises(InvalidArgument, match="'reschedule' needs mode"):
            unique_task("x:{n}", mode=mode, on_conflict="reschedule")


def test_a_celery_task_asked_again_while_it_runs_runs_once_more_after() -> None:
    task = unique_tasks.celery_refresh
    thread, out = in_thread(lambda: task.delay("home"))
    assert unique_tasks.inside.wait(10)
    running = get_lock("celery-refresh:home")
    assert running is not None
    asked = [task.delay("home") for _ in range(3)]
    assert {result.id for result in asked} == {running.celery_task_id}
    assert unique_tasks.runs == ["celery-refresh home"]
    unique_tasks.proceed.set()
    thread.join(20)
    assert out[0].get() == "refreshed home"
    # (eager: the rerun ran in the first run's thread, as it ended)
    assert unique_tasks.runs == ["celery-refresh home", "celery-refresh home"]
    assert get_lock("celery-refresh:home") is None

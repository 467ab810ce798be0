"""``on_conflict="reschedule"``: an enqueue that finds the task queued returns it (that task
runs after the enqueue); one that finds it running asks the run for a rerun, and the run
enqueues its task once more when it ends, however many enqueues asked meanwhile. Django's
tasks (the deferred backend: the test plays the worker) and Celery's (eager)."""

from __future__ import annotations

import queue
import threading
import types
from typing import Any

import pytest
from django.db import transaction

from django_redis_locks import InvalidArgument, Lock, unique_task
from django_redis_locks.connection import get_backend
from django_redis_locks.inspection import get_lock
from django_redis_locks.unique import handing, records
from django_redis_locks.unique.spec import is_queued
from tests.django import unique_tasks
from tests.django.unique_tasks import in_thread, run_as_worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh(settings: Any, namespace: str) -> None:
    unique_tasks.fresh(settings, namespace)
    unique_tasks.refresh.get_backend().results.clear()
    unique_tasks.announce.get_backend().results.clear()


def enqueued() -> list[Any]:
    return enqueued_of(unique_tasks.refresh)


def enqueued_of(task: Any) -> list[Any]:
    return list(task.get_backend().results)


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
        with pytest.raises(InvalidArgument, match=r"'reschedule' (needs mode|has no effect)"):
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


class Runner:
    """The run that holds the name, in a thread of its own (a hold is its owner's): it gives
    its hold back, then looks for a rerun, each step when told."""

    def __init__(self, spec: Any, name: str, sent: list[str]) -> None:
        self.spec, self.name, self.sent = spec, name, sent
        self.steps: queue.Queue[str | None] = queue.Queue()
        self.done: queue.Queue[str] = queue.Queue()
        self.lock = spec.running_lock(name, {"django_task": "run", "django_task_id": "run-1"})
        self.thread = threading.Thread(target=self._work)
        self.thread.start()
        self.step("take")

    def _work(self) -> None:
        while (step := self.steps.get()) is not None:
            if step == "take":
                assert self.lock.acquire(blocking=False)
            elif step == "release":
                self.lock.release()
            else:  # "rerun": what the run does after giving its hold back
                handing.rerun_if_asked(self.spec, self.lock, lambda: self._enqueue("rerun"))
            self.done.put(step)

    def _enqueue(self, what: str) -> Any:
        queued = self.spec.queued_lock(self.name, "refresh", {"django_task": "refresh"})
        return handing.enqueue(
            self.spec, queued, sender(self.sent, what), "refresh", lambda _: None
        )

    def step(self, step: str) -> None:
        self.steps.put(step)
        assert self.done.get(timeout=10) == step

    def stop(self) -> None:
        self.steps.put(None)
        self.thread.join(10)


def sender(sent: list[str], what: str) -> Any:
    """A task backend's enqueue: noted in ``sent``; its result has an id."""

    def send() -> Any:
        sent.append(what)
        return types.SimpleNamespace(id=f"{what}-{len(sent)}")

    return send


def one_order(spec: Any, release_at: int, rerun_at: int, patch: pytest.MonkeyPatch) -> None:
    """One enqueue that reschedules, the run's steps at the enqueue's steps given."""
    name = f"refresh:order-{release_at}-{rerun_at}"
    sent: list[str] = []
    runner = Runner(spec, name, sent)
    steps = 0
    at_steps = ((release_at, "release"), (rerun_at, "rerun"))

    def step_of_the_enqueue(call: Any) -> Any:
        def stepped(*args: Any, **kwargs: Any) -> Any:
            nonlocal steps
            if threading.current_thread() is not runner.thread:
                for at, what in at_steps:
                    if steps == at:
                        runner.step(what)
                steps += 1
            return call(*args, **kwargs)

        return stepped

    with patch.context() as patched:
        for module, attribute in ((handing, "get_lock"), (records, "ask_rerun")):
            patched.setattr(module, attribute, step_of_the_enqueue(getattr(module, attribute)))
        patched.setattr(records, "take_rerun", step_of_the_enqueue(records.take_rerun))
        queued = spec.queued_lock(name, "refresh", {"django_task": "refresh"})
        handing.enqueue(spec, queued, sender(sent, "enqueue"), "refresh", lambda _: None)
    for at, what in at_steps:
        if steps <= at:  # (the enqueue returned first)
            runner.step(what)
    runner.stop()
    assert len(sent) == 1, (release_at, rerun_at, sent)
    holder = get_lock(name)
    assert holder is not None and is_queued(holder), (release_at, rerun_at, holder)
    assert not records.take_rerun(get_backend(), name), "a request left behind"


@pytest.mark.parametrize("release_at", range(6))
def test_every_order_of_a_run_ending_and_a_reschedule_enqueues_the_task_once(
    release_at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An enqueue that reschedules and a run that ends, in every order of their Redis steps:
    the run gives its hold back at the enqueue's step ``release_at``, and looks for a rerun
    at every later step (or after the enqueue returned). Each time the task is enqueued
    exactly once more: by the run (a rerun) or by the enqueue itself."""
    for rerun_at in range(release_at, 7):
        one_order(unique_tasks.refresh.uniqueness, release_at, rerun_at, monkeypatch)


def test_a_rerun_asked_as_an_until_executing_worker_starts_is_not_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker holds the name for a moment as it starts (it takes the queued hold over,
    then gives it back): a request made then is served when it gives the name back."""
    task = unique_tasks.announce
    queued = task.enqueue("home")
    ask = records.ask_rerun
    original_take = handing.take_queued

    def take_then_asked(lock: Any, task_id: Any) -> bool:
        taken = original_take(lock, task_id)
        ask(get_backend(), "announce:home", 60)  # an enqueue saw the starting worker
        return taken

    monkeypatch.setattr(handing, "take_queued", take_then_asked)
    assert run_as_worker(queued) == "announced home"
    [_, rerun] = enqueued_of(task)
    assert task.find("home").task_id == str(rerun.id)
    assert not records.take_rerun(get_backend(), "announce:home")


def test_a_celery_second_delivery_that_finds_its_run_ended_serves_a_rerun_asked_of_it() -> None:
    """A second delivery waited for the run and took the name as it ended; an enqueue saw it
    holding the name and asked for a rerun: when it lets the name go (the run had ended),
    it enqueues the rerun, which nobody else would."""
    task = unique_tasks.celery_refresh
    unique_tasks.proceed.set()
    assert task.apply(("home",), task_id="first-1").get() == "refreshed home"
    records.ask_rerun(get_backend(), "celery-refresh:home", 60)  # asked of the delivery
    assert task.apply(("home",), task_id="first-1").state == "IGNORED"
    assert unique_tasks.runs == ["celery-refresh home", "celery-refresh home"]  # the rerun
    assert get_lock("celery-refresh:home") is None

"""Celery's unique tasks (``base=UniqueTask``) under a real prefork worker (two children, the
broker and result backend on the test's Redis server), enqueued by separate client
processes: the name taken at enqueue and handed to the child that runs the task.

- duplicates enqueued at once by several processes: one is accepted, every other refused
  with ``AlreadyQueued`` naming it, and the task runs once;
- a child SIGKILLed mid-task: the name is freed within the running hold's TTL;
- a task past its hard time limit (the pool kills the child): the same;
- a retry: the name stays taken from the first run to the last, the queued retry included;
- ``on_conflict="reschedule"``: enqueues while the task runs return its handle, and the task
  runs once more after it, however many asked;
- ``acks_late`` with ``reject_on_worker_lost``: the broker delivers the task of a killed
  child again, and that delivery runs it (once the dead run's hold has expired), instead of
  being refused by it.

A killed child is replaced by the pool, so the checks share one deployment.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.deploy import sweep
from tests.deploy.conftest import running
from tests.deploy.deployment import new_namespace
from tests.deploy.processes import wait_for
from tests.deploy.project.section import HARD_TIME_LIMIT, UNIQUE_TTL
from tests.deploy.unique import POLL_SECONDS, Attempt, UniqueCeleryDeployment, lock_name

pytestmark = pytest.mark.deploy

CLIENTS = 4  # processes enqueueing the same task at once
EACH = 5  # enqueues of each
BURST_RUN_SECONDS = 3.0  # the accepted task runs this long: every duplicate comes meanwhile
KILLED_RUN_SECONDS = 60.0  # a task whose child is killed never ends by itself
REDELIVERED_RUN_SECONDS = 4.0  # the acks_late task: killed in its first run, then run again
RETRY_COUNTDOWN = 3.0


@pytest.fixture(scope="module")
def deployment(
    redis_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UniqueCeleryDeployment]:
    """The worker and its clients (named as the conftest's fixture, whose report hook
    records each check's outcome in the figures)."""
    workdir = tmp_path_factory.mktemp("unique-celery")
    yield from running(UniqueCeleryDeployment(redis_server.url, workdir, new_namespace()))


def _runs(deployment: UniqueCeleryDeployment, name: str, kind: str) -> list[dict[str, Any]]:
    return [r for r in sweep.records(deployment.log) if r["name"] == name and r["kind"] == kind]


def _running(deployment: UniqueCeleryDeployment, lock: str, task_id: str | None) -> Any:
    """The hold of the child that runs task ``task_id`` (a process of the worker)."""
    holder = deployment.wait_holder(
        lock,
        lambda info: info.celery_task_id == task_id and not str(info.label).startswith("queued"),
        "a child to take the hold over",
    )
    assert holder.pid is not None and deployment.owns(holder.pid)
    return holder


def _refused_until_free(
    deployment: UniqueCeleryDeployment, kind: str, name: str, since: float
) -> tuple[list[Attempt], Attempt]:
    """Enqueue the same task again and again until it is accepted: (refusals, the accepted
    one)."""
    refusals: list[Attempt] = []
    deadline = since + UNIQUE_TTL + 5
    while True:
        [attempt] = deployment.enqueue(kind, name, 0)
        if attempt.accepted:
            return refusals, attempt
        refusals.append(attempt)
        assert time.monotonic() < deadline, f"still refused {deadline - since:.0f} s after"
        time.sleep(POLL_SECONDS)


@pytest.mark.timeout(180)  # the first check also starts the deployment
def test_duplicates_enqueued_at_once_by_several_processes_queue_and_run_once(
    deployment: UniqueCeleryDeployment,
) -> None:
    name, lock = "burst", lock_name("unique", "burst")
    first, refused, _, _ = deployment.burst(CLIENTS, EACH, "unique", name, BURST_RUN_SECONDS)
    # Celery's task id is made before the enqueue: every refusal names it.
    assert {attempt.task_id for attempt in refused} == {first.task_id}

    running = _running(deployment, lock, first.task_id)
    assert deployment.find("unique", name) == {"phase": "running", "task_id": first.task_id}
    assert not deployment.enqueue("unique", name, 0)[0].accepted
    assert deployment.outcome(str(first.task_id))["value"]["pid"] == running.pid
    deployment.figures["unique_duplicates_run"] = len(_runs(deployment, name, "unique")) - 1
    assert len(_runs(deployment, name, "unique")) == 1, "a duplicate ran"

    deployment.wait_free(lock)
    assert deployment.find("unique", name) is None
    [again] = deployment.enqueue("unique", name, 0)
    assert again.accepted and again.task_id != first.task_id
    assert deployment.outcome(str(again.task_id))["ok"]
    assert len(_runs(deployment, name, "unique")) == 2


@pytest.mark.timeout(90)
def test_a_child_sigkilled_mid_task_frees_the_name_within_the_running_ttl(
    deployment: UniqueCeleryDeployment,
) -> None:
    name, lock = "killed", lock_name("unique", "killed")
    [queued] = deployment.enqueue("unique", name, KILLED_RUN_SECONDS)
    assert queued.accepted
    holder = _running(deployment, lock, queued.task_id)
    renewed = deployment.wait_holder(lock, lambda info: info.held > 2 * UNIQUE_TTL, "renewals")
    assert renewed.holder_id == holder.holder_id and renewed.ttl <= UNIQUE_TTL
    assert holder.pid is not None
    deployment.sigkill(holder.pid)
    killed_at = time.monotonic()
    refusals, accepted = _refused_until_free(deployment, "unique", name, killed_at)
    freed_after = accepted.at - killed_at
    deployment.figures.update(
        celery_kill_to_free_s=round(freed_after, 3), celery_refused_after_kill=len(refusals)
    )
    assert refusals, "accepted at once: the killed child's hold was not there"
    assert all(refused.task_id == queued.task_id for refused in refusals)
    assert freed_after <= UNIQUE_TTL + 1
    assert "WorkerLostError" in deployment.outcome(str(queued.task_id))["error"]
    # The pool replaced the child: the task enqueued anew runs, and gives the name back.
    record = deployment.outcome(str(accepted.task_id))["value"]
    assert record["pid"] != holder.pid
    deployment.wait_free(lock)


@pytest.mark.timeout(90)
def test_a_task_past_its_hard_time_limit_frees_the_name_within_the_running_ttl(
    deployment: UniqueCeleryDeployment,
) -> None:
    name, lock = "overrun", lock_name("limited", "overrun")
    [queued] = deployment.enqueue("limited", name, KILLED_RUN_SECONDS)
    assert queued.accepted
    holder = _running(deployment, lock, queued.task_id)
    limit_at = time.monotonic() - holder.held + HARD_TIME_LIMIT  # (the hold began the run)
    outcome = deployment.outcome(str(queued.task_id))
    assert "TimeLimitExceeded" in outcome["error"], outcome
    refusals, accepted = _refused_until_free(deployment, "limited", name, limit_at)
    freed_after = accepted.at - limit_at
    deployment.figures.update(celery_time_limit_to_free_s=round(freed_after, 3))
    assert all(refused.task_id == queued.task_id for refused in refusals)
    assert freed_after <= UNIQUE_TTL + 1
    assert deployment.outcome(str(accepted.task_id))["value"]["pid"] != holder.pid
    assert len(_runs(deployment, name, "limited")) == 1, "the overrun run ended by itself"
    deployment.wait_free(lock)


@pytest.mark.timeout(90)
def test_a_task_that_retries_keeps_its_name_until_its_last_run_ends(
    deployment: UniqueCeleryDeployment,
) -> None:
    name, lock = "retrying", lock_name("retried", "retrying")
    [queued] = deployment.enqueue("retried", name, RETRY_COUNTDOWN)
    assert queued.accepted
    # The first run ends with self.retry(): the retry waits RETRY_COUNTDOWN in the worker.
    wait_for(lambda: bool(_runs(deployment, name, "retried-first")), timeout=30, what="a run")
    waiting = deployment.wait_holder(
        lock, lambda info: str(info.label).startswith("queued"), "the retry's queued hold"
    )
    assert waiting.celery_task_id == queued.task_id
    assert deployment.find("retried", name) == {"phase": "queued", "task_id": queued.task_id}
    [refused] = deployment.enqueue("retried", name, 0)
    assert not refused.accepted and refused.task_id == queued.task_id

    assert deployment.outcome(str(queued.task_id))["ok"]
    [first] = _runs(deployment, name, "retried-first")
    [last] = _runs(deployment, name, "retried")
    assert last["start"] >= first["end"] + RETRY_COUNTDOWN * 0.9
    assert refused.at < last["start"], "the refusal came after the retry ran"
    deployment.wait_free(lock)
    assert deployment.enqueue("retried", name, 0)[0].accepted


@pytest.mark.timeout(90)
def test_an_acks_late_task_whose_child_is_killed_is_delivered_again_and_runs_once(
    deployment: UniqueCeleryDeployment,
) -> None:
    name, lock = "lost", lock_name("redelivered", "lost")
    [queued] = deployment.enqueue("redelivered", name, REDELIVERED_RUN_SECONDS)
    assert queued.accepted
    holder = _running(deployment, lock, queued.task_id)
    assert holder.pid is not None
    deployment.sigkill(holder.pid)
    killed_at = time.monotonic()
    outcome = deployment.outcome(str(queued.task_id))
    assert outcome["ok"], f"the delivery after the kill did not run it: {outcome}"
    [run] = _runs(deployment, name, "redelivered")
    assert run["pid"] != holder.pid
    deployment.figures["celery_kill_to_redelivered_run_s"] = round(run["start"] - killed_at, 3)
    # It waited for the dead run's hold (never beside it): the hold expires within its TTL,
    # and a waiter re-checks at least every second.
    assert run["start"] - killed_at <= UNIQUE_TTL + 2
    deployment.wait_free(lock)
    assert len(_runs(deployment, name, "redelivered")) == 1, "it ran twice"


@pytest.mark.timeout(90)
def test_enqueues_while_a_task_runs_reschedule_it_once_after_the_run(
    deployment: UniqueCeleryDeployment,
) -> None:
    name, lock = "page", lock_name("refreshed", "page")
    [first] = deployment.enqueue("refreshed", name, RETRY_COUNTDOWN)
    assert first.accepted
    _running(deployment, lock, first.task_id)
    asked = deployment.enqueue("refreshed", name, 0, count=5)
    assert {attempt.task_id for attempt in asked} == {first.task_id}  # its handle, each time
    assert deployment.outcome(str(first.task_id))["ok"]
    rerun = deployment.wait_holder(
        lock, lambda info: info.celery_task_id != first.task_id, "the rerun to be enqueued"
    )
    assert deployment.outcome(str(rerun.celery_task_id))["ok"]
    deployment.wait_free(lock)
    runs = _runs(deployment, name, "refreshed")
    deployment.figures["rescheduled_runs"] = len(runs)
    assert len(runs) == 2, runs
    assert runs[1]["start"] >= runs[0]["end"]
    assert all(attempt.at < runs[0]["end"] for attempt in asked)

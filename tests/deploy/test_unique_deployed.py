"""``@unique_task`` under real ``db_worker`` processes (django-tasks-db's database backend on
an SQLite file, two workers), enqueued by separate client processes: the name taken at
enqueue and handed to the worker that runs the task, across processes.

- duplicates enqueued at once by several processes: one is accepted, every other refused
  with ``AlreadyQueued``, and the task runs once;
- a worker SIGKILLed mid-task: the name is freed within the running hold's TTL (renewal
  stopped), refused until then;
- ``until_executing``: the name is given back when a worker starts the task, so a second
  one queues while the first runs, and a third is refused while the second is queued.

The SIGKILL check has a deployment of its own (one of its two workers dies).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.deploy import sweep
from tests.deploy.conftest import running
from tests.deploy.deployment import new_namespace
from tests.deploy.project.section import UNIQUE_TTL
from tests.deploy.unique import POLL_SECONDS, Attempt, UniqueDeployment, lock_name
from tests.deploy.workers import missing

pytestmark = pytest.mark.deploy

CLIENTS = 4  # processes enqueueing the same task at once
EACH = 5  # enqueues of each
BURST_RUN_SECONDS = 3.0  # the accepted task runs this long: every duplicate comes meanwhile
KILLED_RUN_SECONDS = 60.0  # the task whose worker is SIGKILLed never ends by itself
RUN_SECONDS = 4.0  # until_executing: the first task (and the task keeping the other worker)


def _deploy(
    redis_server: Any, tmp_path_factory: pytest.TempPathFactory, label: str
) -> Iterator[UniqueDeployment]:
    lacking = missing("django-tasks", "db_worker")
    if lacking:
        pytest.skip(lacking)
    workdir = tmp_path_factory.mktemp(label)
    yield from running(UniqueDeployment(redis_server.url, workdir, new_namespace()))


@pytest.fixture(scope="module")
def deployment(
    redis_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UniqueDeployment]:
    """Two db_workers for the checks that leave them running (named as the conftest's
    fixture, whose report hook records each check's outcome in the figures)."""
    yield from _deploy(redis_server, tmp_path_factory, "unique-db_worker")


@pytest.fixture
def killable(
    redis_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UniqueDeployment]:
    """Two db_workers of the SIGKILL check's own."""
    yield from _deploy(redis_server, tmp_path_factory, "unique-killed")


def _runs(deployment: UniqueDeployment, name: str) -> list[dict[str, Any]]:
    return [r for r in sweep.records(deployment.log) if r["name"] == name]


@pytest.mark.timeout(180)  # the first check also starts the deployment
def test_duplicates_enqueued_at_once_by_several_processes_queue_and_run_once(
    deployment: UniqueDeployment,
) -> None:
    name, lock = "burst", lock_name("unique", "burst")
    first, refused, clients, by_client = deployment.burst(
        CLIENTS, EACH, "unique", name, BURST_RUN_SECONDS
    )
    assert len(refused) == CLIENTS * EACH - 1
    # A refusal names the task that has the name (None only before its id is stored).
    assert {attempt.task_id for attempt in refused} <= {first.task_id, None}
    assert first.task_id in {attempt.task_id for attempt in refused}

    # The worker that runs it holds the name under the task's id.
    running = deployment.wait_holder(
        lock, lambda info: info.django_task_id is not None, "the worker to take the hold over"
    )
    assert running.django_task_id == first.task_id
    deployment.db_worker(running.pid)
    assert deployment.find("unique", name) == {"phase": "running", "task_id": first.task_id}
    assert not deployment.enqueue("unique", name, 0)[0].accepted

    [owner] = [c for c, tried in zip(clients, by_client, strict=True) if first in tried]
    assert deployment.result(str(first.task_id), owner)["value"]["name"] == name
    deployment.figures["unique_duplicates_run"] = len(_runs(deployment, name)) - 1
    assert len(_runs(deployment, name)) == 1, "a duplicate ran"
    assert list(deployment.rows("unique").values()) == ["SUCCESSFUL"], "a duplicate was stored"

    # Once the run has ended the name is free: the next enqueue is accepted, and runs.
    deployment.wait_free(lock)
    assert deployment.find("unique", name) is None
    [again] = deployment.enqueue("unique", name, 0)
    assert again.accepted and again.task_id != first.task_id
    deployment.result(str(again.task_id))
    assert len(_runs(deployment, name)) == 2


@pytest.mark.timeout(90)
def test_until_executing_queues_a_second_task_while_the_first_runs(
    deployment: UniqueDeployment,
) -> None:
    name, lock = "starting", lock_name("starting", "starting")
    # Both workers busy: the first task on one, an unlocked task on the other, so that the
    # second task stays queued.
    blocker = deployment.begin("bare", "blocker", RUN_SECONDS)
    [first] = deployment.enqueue("starting", name, RUN_SECONDS)
    assert first.accepted
    deployment.wait_status("starting", str(first.task_id), "RUNNING")
    deployment.wait_status("bare", str(blocker.handle), "RUNNING")
    deployment.wait_free(lock)  # given back as the worker starts it (just after RUNNING)

    [second] = deployment.enqueue("starting", name, 0)
    [third] = deployment.enqueue("starting", name, 0)
    found = deployment.find("starting", name)
    first_run = deployment.result(str(first.task_id))["value"]
    assert second.accepted, "refused while the first task ran (its name not given back)"
    # (accepted as the worker started the first, its run lasting RUN_SECONDS after that)
    assert second.at < first_run["end"] - RUN_SECONDS / 2, "accepted only after the first ran"
    assert not third.accepted, "a third queued while the second was queued"
    assert third.task_id == second.task_id
    assert found == {"phase": "queued", "task_id": second.task_id}

    second_run = deployment.result(str(second.task_id))["value"]
    assert deployment.finish(blocker, 30).ran
    runs = _runs(deployment, name)
    deployment.figures["until_executing_runs"] = len(runs)
    assert len(runs) == 2
    assert second_run["start"] >= third.at, "the second task was running, not queued"
    assert set(deployment.rows("starting")) == {first.task_id, second.task_id}
    deployment.wait_free(lock)


@pytest.mark.timeout(150)
def test_a_worker_sigkilled_mid_task_frees_the_name_within_the_running_ttl(
    killable: UniqueDeployment,
) -> None:
    deployment = killable
    name, lock = "killed", lock_name("unique", "killed")
    [queued] = deployment.enqueue("unique", name, KILLED_RUN_SECONDS)
    assert queued.accepted
    holder = deployment.wait_holder(
        lock, lambda info: info.django_task_id is not None, "the worker to take the hold over"
    )
    assert holder.django_task_id == queued.task_id
    worker = deployment.db_worker(holder.pid)  # the db_worker's main process runs the task
    renewed = deployment.wait_holder(  # past its TTL: renewal keeps it (then the kill stops it)
        lock, lambda info: info.held > 2 * UNIQUE_TTL, "renewals"
    )
    assert renewed.holder_id == holder.holder_id
    assert renewed.ttl <= UNIQUE_TTL
    [before] = deployment.enqueue("unique", name, 0)
    assert not before.accepted and before.task_id == queued.task_id

    last = deployment.holder(lock)  # the TTL its last renewal left
    deployment.sigkill(worker.pid)
    killed_at = time.monotonic()
    refusals: list[Attempt] = []
    deadline = killed_at + UNIQUE_TTL + 5
    while True:  # the same name enqueued again and again, until it is accepted
        [attempt] = deployment.enqueue("unique", name, 0)
        if attempt.accepted:
            break
        refusals.append(attempt)
        assert time.monotonic() < deadline, f"still refused {deadline - killed_at:.0f} s after"
        time.sleep(POLL_SECONDS)
    freed_after = attempt.at - killed_at
    deployment.figures.update(
        unique_kill_ttl_s=UNIQUE_TTL,
        kill_to_free_s=round(freed_after, 3),
        unique_refused_after_kill=len(refusals),
        unique_renewed_every_s=renewed.renewed_every,
        unique_ttl_left_at_kill_s=None if last is None else last.ttl,
    )
    assert refusals, "accepted at once: the killed worker's hold was not there"
    assert all(refused.task_id == queued.task_id for refused in refusals)
    assert freed_after <= UNIQUE_TTL + 1
    assert not worker.alive

    # The task enqueued anew runs on the other worker, and gives the name back.
    record = deployment.result(str(attempt.task_id))["value"]
    assert record["pid"] != worker.pid
    assert deployment.rows("unique")[str(queued.task_id)] == "RUNNING"  # left by the dead one
    deployment.wait_free(lock)

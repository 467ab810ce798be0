"""Unique Django tasks for tests/django/test_unique_tasks.py: ``@unique_task`` above
``@task()``. Most run on the "deferred" backend (DummyBackend: it keeps what is enqueued and
runs nothing), so that a test plays the worker with :func:`run_as_worker`; ``instant`` runs
on the ImmediateBackend (run at enqueue, as a worker would)."""

from __future__ import annotations

import threading
from typing import Any

from django.utils.module_loading import import_string

from django_redis_locks import unique_task

try:
    from django.tasks import TaskContext, task
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django < 6.0
    from django_tasks import TaskContext, task  # type: ignore[no-redef,assignment]
    from django_tasks.signals import (  # type: ignore[no-redef,unused-ignore]
        task_enqueued,
        task_finished,
        task_started,
    )

__all__ = ["TaskContext", "in_thread", "run_as_worker", "runs", "task_enqueued"]

runs: list[str] = []
#: Set by a task while it runs, and awaited before it returns (see ``paused``).
inside = threading.Event()
proceed = threading.Event()


def fresh(settings: Any, namespace: str) -> None:
    """Each test's start: the locks in the test's namespace, nothing run or awaited."""
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    runs.clear()
    inside.clear()
    proceed.clear()


def in_thread(function: Any) -> tuple[threading.Thread, list[Any]]:
    """Call ``function`` in a new thread: (the thread, [its return value or exception] once
    it ends)."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(function())
        except BaseException as error:
            out.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


@unique_task("rebuild:{report_id}", mode="until_executed", timeout=5)
@task(backend="deferred")
def rebuild(report_id: int) -> str:
    runs.append(f"rebuild {report_id}")
    return f"rebuilt {report_id}"


@unique_task("paused:{report_id}", mode="until_executed", timeout=5)
@task(backend="deferred")
def paused(report_id: int) -> str:
    inside.set()
    assert proceed.wait(20)
    return f"done {report_id}"


@unique_task("notify:{user_id}", mode="until_executing", on_conflict="skip")
@task(backend="deferred")
def notify(user_id: int) -> str:
    runs.append(f"notify {user_id}")
    inside.set()
    assert proceed.wait(20)
    return "sent"


@unique_task("digest:{day}", mode="until_expired", queued_timeout=1.0)
@task(backend="deferred")
def digest(day: str) -> str:
    runs.append(f"digest {day}")
    return "digested"


@unique_task("sync:{account}", mode="while_executing", on_contention="skip", skip_result="busy")
@task(backend="deferred")
def sync_account(account: str) -> str:
    runs.append(f"sync {account}")
    return "synced"


@unique_task("export:{export_id}", mode="until_executed", queued_timeout=1.0)
@task(backend="deferred", takes_context=True)
def export(context: Any, export_id: int) -> str:
    runs.append(f"export {export_id} {context.task_result.id}")
    return "exported"


@unique_task("refresh:{page}", on_conflict="reschedule", timeout=5)
@task(backend="deferred")
def refresh(page: str) -> str:
    """Asked again while it runs: runs once more after."""
    runs.append(f"refresh {page}")
    inside.set()
    assert proceed.wait(20)
    return f"refreshed {page}"


@unique_task("mirror:{account}", mode="while_executing", timeout=5)
@task(backend="deferred")
def mirror(account: str) -> str:
    inside.set()
    assert proceed.wait(20)
    return f"mirrored {account}"


@unique_task("pair:{items}", timeout=5)
@task(backend="deferred")
def pair(items: Any) -> str:
    runs.append(f"pair {list(items)}")
    return "paired"


@unique_task("announce:{page}", mode="until_executing", on_conflict="reschedule")
@task(backend="deferred")
def announce(page: str) -> str:
    runs.append(f"announce {page}")
    return f"announced {page}"


@unique_task("instant:{n}")
@task()
def instant(n: int) -> int:
    runs.append(f"instant {n}")
    return n * 2


def run_as_worker(task_result: Any) -> Any:
    """Run an enqueued task as a worker does (django-tasks-db's ``db_worker``): the
    ``task_started`` signal, then ``task.call`` on the task its module path names."""
    task_ = import_string(task_result.task.module_path)  # (what a worker runs)
    backend = type(task_.get_backend())
    task_started.send(sender=backend, task_result=task_result)
    try:
        if task_.takes_context:
            return task_.call(
                TaskContext(task_result=task_result), *task_result.args, **task_result.kwargs
            )
        return task_.call(*task_result.args, **task_result.kwargs)
    finally:
        task_finished.send(sender=backend, task_result=task_result)


# -- Celery (eager: apply_async runs the task in the calling thread, as a worker would) ------
from celery import shared_task  # noqa: E402

from django_redis_locks.unique.celery_tasks import UniqueTask  # noqa: E402
from tests.django.decorated_tasks import celery_app  # noqa: E402, F401  (eager, and current)

tries: dict[str, int] = {}


@shared_task(base=UniqueTask, unique={"key": "celery-rebuild:{report_id}", "timeout": 5})
def celery_rebuild(report_id: int) -> str:
    runs.append(f"celery-rebuild {report_id}")
    inside.set()
    assert proceed.wait(20)
    return f"rebuilt {report_id}"


@shared_task(
    base=UniqueTask,
    bind=True,
    unique={"key": "celery-flaky:{job}", "on_conflict": "skip"},
    max_retries=3,
)
def celery_flaky(self: Any, job: str) -> str:
    tries[job] = tries.get(job, 0) + 1
    if tries[job] < 2:
        raise self.retry(countdown=0)
    return f"{job} after {tries[job]} tries"


@shared_task(base=UniqueTask, unique={"key": "celery-report:{report_id}", "timeout": 1})
def celery_report(report_id: int) -> str:
    """Held with a TTL of 1 s (renewed): a second delivery waits about that long."""
    runs.append(f"celery-report {report_id}")
    inside.set()
    assert proceed.wait(20)
    return f"reported {report_id}"


@shared_task(base=UniqueTask, unique={"key": "celery-refresh:{page}", "on_conflict": "reschedule"})
def celery_refresh(page: str) -> str:
    runs.append(f"celery-refresh {page}")
    inside.set()
    assert proceed.wait(20)
    return f"refreshed {page}"


@shared_task(base=UniqueTask, unique={"key": "celery-pair:{items}", "timeout": 5})
def celery_pair(items: Any) -> str:
    runs.append(f"celery-pair {list(items)}")
    return "paired"

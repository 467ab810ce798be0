"""The task client the tests talk to: ``python -m tests.deploy.project.client celery|django``
enqueues the project's tasks and reads their results, the way the project's own code would
(Celery's ``apply_async`` / ``AsyncResult``, Django's ``Task.enqueue`` / ``get_result``).

It reads one JSON command per line on stdin and answers one JSON line on stdout:

- ``{"op": "send", "task": "locked", "args": ["name", 0.1]}`` -> ``{"id": "..."}``
- ``{"op": "wait", "ids": [...], "timeout": 60}`` -> ``{"results": [{"ok": true, "value": ...}
  or {"ok": false, "error": "..."}, ...]}`` (in the order of ``ids``)

and, for unique tasks (Django's, :mod:`tests.deploy.project.unique_jobs`; Celery's, in
:mod:`tests.deploy.project.celery_app`):

- ``{"op": "enqueue", "task": "unique", "args": [...], "count": 5, "at": 12.5}`` ->
  ``{"outcomes": [{"t": ..., "id": "..."} or {"t": ..., "refused": true, "task_id": ...}]}``:
  ``count`` enqueues one after the other from the instant ``at`` of ``time.monotonic()`` (one
  clock for every process of the machine: clients told the same ``at`` start together), each
  accepted or refused with ``AlreadyQueued``; ``t`` is when each began;
- ``{"op": "find", "task": "unique", "args": [...]}`` -> ``{"found": null or {"phase": ...,
  "task_id": ...}}``: the task queued or running with these arguments (``task.find``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Protocol

Outcome = dict[str, Any]


class Tasks(Protocol):
    def send(self, task: str, args: list[Any]) -> str: ...

    def wait(self, result_id: str, deadline: float) -> Outcome: ...

    def unique(self, task: str) -> Any:
        """The unique task ``task`` (its enqueue may raise AlreadyQueued, and it has find)."""


def enqueue(
    tasks: Tasks, task: str, args: list[Any], count: int, at: float | None
) -> list[Outcome]:
    """``count`` enqueues of a unique task, from the instant ``at``."""
    from django_redis_locks import AlreadyQueued

    if at is not None:  # the start instant the test gave every client
        time.sleep(max(0.0, at - time.monotonic()))
    outcomes: list[Outcome] = []
    for _ in range(count):
        began = time.monotonic()
        try:
            result_id = tasks.send(task, args)
        except AlreadyQueued as refused:
            outcomes.append({"t": began, "refused": True, "task_id": refused.task_id})
            continue
        outcomes.append({"t": began, "id": result_id})
    return outcomes


def find(tasks: Tasks, task: str, args: list[Any]) -> Outcome | None:
    found = tasks.unique(task).find(*args)
    return None if found is None else {"phase": found.phase, "task_id": found.task_id}


class CeleryTasks:
    def __init__(self) -> None:
        from tests.deploy.project.celery_app import app

        self.app = app

    def send(self, task: str, args: list[Any]) -> str:
        return str(self.unique(task).apply_async(args=args).id)

    def unique(self, task: str) -> Any:
        return self.app.tasks[f"deploy.{task}"]

    def wait(self, result_id: str, deadline: float) -> Outcome:
        from celery.exceptions import TimeoutError as CeleryTimeout

        result = self.app.AsyncResult(result_id)
        try:
            value = result.get(timeout=max(0.1, deadline - time.monotonic()), propagate=False)
        except CeleryTimeout:
            return {"ok": False, "error": f"no result in time (state {result.state})"}
        if result.failed():
            return {"ok": False, "error": repr(value)}
        return {"ok": True, "value": value}


class DjangoTasks:
    def __init__(self) -> None:
        import django

        django.setup()
        from tests.deploy.project import jobs, unique_jobs

        self.tasks = {**jobs.TASKS, **unique_jobs.TASKS}
        self.sent: dict[str, Any] = {}  # result id -> its task

    def send(self, task: str, args: list[Any]) -> str:
        result = self.tasks[task].enqueue(*args)
        self.sent[result.id] = self.tasks[task]
        return str(result.id)

    def unique(self, task: str) -> Any:
        return self.tasks[task]

    def wait(self, result_id: str, deadline: float) -> Outcome:
        result = self.sent[result_id].get_result(result_id)
        while not result.is_finished:
            if time.monotonic() >= deadline:
                return {"ok": False, "error": f"no result in time (status {result.status})"}
            time.sleep(0.02)
            result.refresh()
        if result.errors:
            error = result.errors[-1]
            last = error.traceback.strip().splitlines()[-1:] or [""]
            return {"ok": False, "error": f"{error.exception_class_path}: {last[0]}"}
        return {"ok": True, "value": result.return_value}


def serve(tasks: Tasks) -> None:
    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        if op == "send":
            reply: dict[str, Any] = {"id": tasks.send(command["task"], command["args"])}
        elif op == "wait":
            deadline = time.monotonic() + float(command["timeout"])
            reply = {"results": [tasks.wait(result_id, deadline) for result_id in command["ids"]]}
        elif op == "enqueue":
            args = (command["task"], command["args"], command["count"], command["at"])
            reply = {"outcomes": enqueue(tasks, *args)}
        elif op == "find":
            reply = {"found": find(tasks, command["task"], command["args"])}
        else:
            reply = {"error": f"unknown op {op!r}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.deploy.project.settings")
    kind = sys.argv[1]
    serve(CeleryTasks() if kind == "celery" else DjangoTasks())


if __name__ == "__main__":
    main()

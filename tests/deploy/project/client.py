"""The task client the tests talk to: ``python -m tests.deploy.project.client celery|django``
enqueues the project's tasks and reads their results, the way the project's own code would
(Celery's ``apply_async`` / ``AsyncResult``, Django's ``Task.enqueue`` / ``get_result``).

It reads one JSON command per line on stdin and answers one JSON line on stdout:

- ``{"op": "send", "task": "locked", "args": ["name", 0.1]}`` -> ``{"id": "..."}``
- ``{"op": "wait", "ids": [...], "timeout": 60}`` -> ``{"results": [{"ok": true, "value": ...}
  or {"ok": false, "error": "..."}, ...]}`` (in the order of ``ids``)
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


class CeleryTasks:
    def __init__(self) -> None:
        from tests.deploy.project.celery_app import app

        self.app = app

    def send(self, task: str, args: list[Any]) -> str:
        return str(self.app.tasks[f"deploy.{task}"].apply_async(args=args).id)

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
        from tests.deploy.project import jobs

        self.tasks = jobs.TASKS
        self.sent: dict[str, Any] = {}  # result id -> its task

    def send(self, task: str, args: list[Any]) -> str:
        result = self.tasks[task].enqueue(*args)
        self.sent[result.id] = self.tasks[task]
        return str(result.id)

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

"""Persistent worker processes that run measurement tasks in step with each other.

A measurement hands the pool a *task* (``"module:function"``, imported in the worker) and one
parameter dict per worker. Each worker calls ``function(params, link)``; the task sets itself
up, calls :meth:`Link.ready` and gets back the common start time (``time.monotonic_ns()``,
which on Linux is one clock for every process), runs, and returns a picklable result.
Tasks that need a conversation with the parent (the handoff measurement) use
:meth:`Link.send` / :meth:`Link.recv` and the parent's :class:`Session`.

Workers are started once per run with the ``spawn`` method (no inherited threads or
sockets) and reused, so process start-up never eats into a measurement window.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["Link", "Session", "WorkerError", "WorkerPool", "sleep_until"]

#: Longest the parent waits for one message from a worker before giving up on the run.
REPLY_TIMEOUT = 120.0
#: Delay between "everyone is ready" and the common start time.
START_DELAY_NS = 50_000_000


class WorkerError(RuntimeError):
    """A worker task failed or stopped answering; carries the worker's traceback."""


def sleep_until(deadline_ns: int) -> None:
    """Sleep until ``time.monotonic_ns()`` reaches ``deadline_ns``."""
    remaining = deadline_ns - time.monotonic_ns()
    if remaining > 0:
        time.sleep(remaining / 1e9)


class Link:
    """A running task's line to the parent."""

    def __init__(self, conn: Connection, index: int) -> None:
        self._conn = conn
        self.index = index

    def ready(self) -> int:
        """Tell the parent this worker is set up; block until the start time, and return it."""
        self._conn.send(("ready", None))
        kind, start_ns = self._conn.recv()
        if kind != "start":
            raise WorkerError(f"worker {self.index}: expected a start time, got {kind!r}")
        sleep_until(start_ns)
        return int(start_ns)

    def send(self, message: Any) -> None:
        self._conn.send(("message", message))

    def recv(self) -> Any:
        kind, message = self._conn.recv()
        if kind != "message":
            raise WorkerError(f"worker {self.index}: expected a message, got {kind!r}")
        return message


def _resolve(task: str) -> Callable[[dict[str, Any], Link], Any]:
    module_name, _, function = task.partition(":")
    function_obj: Callable[[dict[str, Any], Link], Any] = getattr(
        importlib.import_module(module_name), function
    )
    return function_obj


def _worker_main(conn: Connection, index: int) -> None:
    while True:
        try:
            kind, payload = conn.recv()
        except EOFError:
            return
        if kind == "stop":
            return
        task, params = payload
        try:
            result = _resolve(task)(params, Link(conn, index))
        except BaseException:
            conn.send(("error", traceback.format_exc()))
        else:
            conn.send(("result", result))


class _Worker:
    def __init__(self, ctx: Any, index: int) -> None:
        parent_end, child_end = ctx.Pipe()
        self.index = index
        self.conn: Connection = parent_end
        self.process = ctx.Process(
            target=_worker_main, args=(child_end, index), name=f"bench-worker-{index}", daemon=True
        )
        self.process.start()
        child_end.close()

    def expect(self, wanted: str) -> Any:
        if not self.conn.poll(REPLY_TIMEOUT):
            raise WorkerError(f"worker {self.index} sent nothing for {REPLY_TIMEOUT:g} s")
        kind, payload = self.conn.recv()
        if kind == "error":
            raise WorkerError(f"worker {self.index} failed:\n{payload}")
        if kind != wanted:
            raise WorkerError(f"worker {self.index}: expected {wanted!r}, got {kind!r}")
        return payload


class Session:
    """Tasks running on some workers, as the parent sees them."""

    def __init__(self, workers: Sequence[_Worker]) -> None:
        self._workers = list(workers)

    def __len__(self) -> int:
        return len(self._workers)

    def wait_ready(self) -> None:
        for worker in self._workers:
            worker.expect("ready")

    def start(self, delay_ns: int = START_DELAY_NS) -> int:
        """Send every worker the common start time (now + ``delay_ns``); returns it."""
        start_ns = time.monotonic_ns() + delay_ns
        for worker in self._workers:
            worker.conn.send(("start", start_ns))
        return start_ns

    def send(self, index: int, message: Any) -> None:
        self._workers[index].conn.send(("message", message))

    def recv(self, index: int) -> Any:
        return self._workers[index].expect("message")

    def results(self) -> list[Any]:
        """Each task's return value, in worker order."""
        return [worker.expect("result") for worker in self._workers]


class WorkerPool:
    """``size`` worker processes, started now and stopped by :meth:`close`."""

    def __init__(self, size: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._workers = [_Worker(ctx, index) for index in range(size)]

    @property
    def size(self) -> int:
        return len(self._workers)

    def begin(self, task: str, params: Sequence[dict[str, Any]]) -> Session:
        """Start ``task`` on the first ``len(params)`` workers, one parameter dict each."""
        if len(params) > len(self._workers):
            raise ValueError(f"{len(params)} tasks for a pool of {len(self._workers)} workers")
        workers = self._workers[: len(params)]
        for worker, task_params in zip(workers, params, strict=True):
            worker.conn.send(("task", (task, task_params)))
        return Session(workers)

    def run(
        self,
        task: str,
        params: Sequence[dict[str, Any]],
        *,
        before_start: Callable[[], None] | None = None,
    ) -> list[Any]:
        """Run ``task`` in step: wait until all are ready, start them together, collect.

        ``before_start`` runs once every worker is ready, just before the start time is sent
        (take the "before" command counts there).
        """
        session = self.begin(task, params)
        session.wait_ready()
        if before_start is not None:
            before_start()
        session.start()
        return session.results()

    def close(self) -> None:
        for worker in self._workers:
            with contextlib.suppress(BrokenPipeError, OSError):
                worker.conn.send(("stop", None))
        for worker in self._workers:
            worker.process.join(5)
            if worker.process.is_alive():
                worker.process.terminate()
                worker.process.join(5)

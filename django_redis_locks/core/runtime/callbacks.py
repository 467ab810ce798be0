"""The callback thread: where background findings reach user code, off every renewal path.

Losses that a renewal lane finds are reported here: the primitive's log line, ``lost``
events (and the Django ``hold_lost`` receivers behind them) and ``on_lost`` callbacks. A slow
or failing callback therefore never delays a renewal. Callbacks run one at a time, in the
order they were submitted; one that raises is logged and the next runs.

One thread per runtime (see :func:`.ownership.runtime_key`), started by the first callback
and ended after a while without work. Each time its queue runs empty it calls the *idle
hooks*: the Django layer closes the thread's database connections there, so an ORM receiver
leaves no connection open.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from .exiting import exiting, quiet_at_exit, stop_at_exit
from .ownership import PerRuntime

__all__ = ["CallbackThread", "add_idle_hook", "callbacks"]

logger = quiet_at_exit(logging.getLogger(__name__))

_IDLE_EXIT_SECONDS = 30.0
_idle_hooks: tuple[Callable[[], None], ...] = ()


def add_idle_hook(hook: Callable[[], None]) -> None:
    """Call ``hook()`` on the callback thread whenever its queue runs empty (once per hook)."""
    global _idle_hooks
    if hook not in _idle_hooks:
        _idle_hooks = (*_idle_hooks, hook)


class CallbackThread:
    """Runs submitted callables one by one on a thread of its own. Use :func:`callbacks`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._thread: threading.Thread | None = None
        self._busy = False
        self._exit = False  # the interpreter exits: the thread ends, pending calls do not run
        stop_at_exit(self)

    def submit(self, function: Callable[..., Any], *args: Any) -> None:
        """Run ``function(*args)`` on the callback thread, after what was submitted before."""
        with self._cond:
            self._queue.append((function, args))
            thread = None
            if exiting():  # nothing runs on the way out
                return
            if self._thread is None:
                thread = self._thread = threading.Thread(
                    target=self._run, name="drl-callbacks", daemon=True
                )
            else:
                self._cond.notify()
        if thread is not None:
            thread.start()  # outside the mutex: under gevent, starting may switch greenlets

    @property
    def running(self) -> bool:
        return self._thread is not None

    def stop_for_exit(self) -> threading.Thread | None:
        with self._cond:
            self._exit = True
            self._cond.notify_all()
            return self._thread

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue:
                    self._cond.wait_for(lambda: bool(self._queue) or self._exit, _IDLE_EXIT_SECONDS)
                if self._exit or not self._queue:
                    self._thread = None
                    return
                function, args = self._queue.popleft()
                self._busy = True
            try:
                function(*args)
            except Exception:
                logger.exception("callback %r failed", function)
            finally:
                with self._cond:
                    idle = not self._queue
                if idle:
                    self._run_idle_hooks()
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    @staticmethod
    def _run_idle_hooks() -> None:
        for hook in _idle_hooks:
            try:
                hook()
            except Exception:
                logger.exception("idle hook %r of the callback thread failed", hook)


_callbacks = PerRuntime(CallbackThread)


def callbacks() -> CallbackThread:
    """The callback thread of this runtime (a fresh one after ``fork()`` or monkey-patching)."""
    return _callbacks.get()

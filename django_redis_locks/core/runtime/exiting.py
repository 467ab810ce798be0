"""Interpreter exit: the background threads stop before Python finalizes.

Renewal lanes, the callback thread and wake-up listeners are daemon threads, so they never keep
a process alive. But Python finalizes with daemon threads still running, and one that writes
to stderr at that moment (a log line: the process's Redis went away as it ended, as a test
run's servers do) aborts the interpreter with "Fatal Python error: _enter_buffered_busy". So at
exit (after the program's own threads were joined, before finalization) each thread of ours is
told to stop and joined for at most :data:`STOP_SECONDS` in all; one still inside a call to
Redis then logs nothing more. No work is done on the way out: holds left renewed run out at
their TTL, as after a crash, and pending callbacks do not run.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from typing import Any, Protocol

from .ownership import runtime_key

__all__ = ["STOP_SECONDS", "exiting", "quiet_at_exit", "stop_at_exit"]

#: The longest the interpreter's exit waits for our threads, in all.
STOP_SECONDS = 1.0

_exiting = False


class Stoppable(Protocol):
    def stop_for_exit(self) -> threading.Thread | None:
        """Wake the thread so that it ends; return it (None if none runs)."""


#: Each owner with the runtime it was made in: only the exiting runtime's threads are stopped
#: (a thread made before ``threading`` was monkey-patched cannot end cleanly after it).
_stoppables: weakref.WeakKeyDictionary[Stoppable, Any] = weakref.WeakKeyDictionary()


def exiting() -> bool:
    """Whether the interpreter is exiting (background threads end their loops)."""
    return _exiting


def stop_at_exit(owner: Stoppable) -> None:
    """Stop ``owner``'s thread when the interpreter exits (``owner`` is held weakly)."""
    _stoppables[owner] = runtime_key()


class _QuietAtExit(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _exiting or threading.current_thread() is threading.main_thread()


_QUIET = _QuietAtExit()


def quiet_at_exit(logger: logging.Logger) -> logging.Logger:
    """Drop ``logger``'s records from background threads once the interpreter exits."""
    logger.addFilter(_QUIET)
    return logger


def _stop_all() -> None:
    global _exiting
    _exiting = True
    runtime = runtime_key()
    owners = [owner for owner, made_in in list(_stoppables.items()) if made_in == runtime]
    threads = [thread for owner in owners if (thread := owner.stop_for_exit())]
    deadline = time.monotonic() + STOP_SECONDS
    for thread in threads:
        if thread is not threading.current_thread() and thread.ident is not None:
            thread.join(max(deadline - time.monotonic(), 0.0))


atexit.register(_stop_all)

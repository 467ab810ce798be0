"""A child forked while another thread of its parent was inside the library's module-level
locks can still use the library (fork copies a held lock as held, and nobody in the child
would ever release it)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from django_redis_locks.core import Lock
from django_redis_locks.core.connection import backend
from tests.harness.clients import sync_from_url

CHILD_SECONDS = 10.0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_child_forked_while_the_backend_cache_was_locked_can_make_backends(
    redis_server: Any, namespace: str
) -> None:
    """The parent's other thread is inside backend_for_client (here: holds its mutex) at
    the moment of fork(); the child then makes a lock on a client of its own."""
    with backend._cache_mutex:  # as another thread of the parent at the moment of fork()
        pid = os.fork()
        if pid == 0:  # the child: exit 0 if it could take and release a lock
            code = 1
            try:
                signal.alarm(int(CHILD_SECONDS))  # a deadlock ends the child, not the suite
                client = sync_from_url(redis_server.url, socket_timeout=5)
                lock = Lock(f"forked-{namespace}", client=client, timeout=5)
                if lock.acquire(blocking=False):
                    lock.release()
                    code = 0
            finally:
                os._exit(code)
    deadline = time.monotonic() + CHILD_SECONDS + 5
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:  # pragma: no cover - the alarm ends it first
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.05)
    assert os.WIFEXITED(status), f"the child did not exit (deadlocked): status {status}"
    assert os.WEXITSTATUS(status) == 0, "the child could not take a lock (it hung, or failed)"

"""Ctrl-C landing inside the client library: after a script's request went out on a pooled
connection and before its reply was read.

redis-py disconnects a connection when an exception reaches it while sending or while reading
a reply, but a KeyboardInterrupt raised by a signal handler can land between the two, in its
own code. The connection then goes back to the pool with the reply unread, and the next call
on it reads that reply as its own. An outside review found it by raising KeyboardInterrupt
from a SIGALRM handler at random moments (1 run in 7): other threads' acquires failed with a
TypeError, releases reported a force-release that never happened, and a name stayed held
after every thread had stopped. Here the interruption lands at that very point, every time.

Open: the library does not yet guard against it (it would have to take the connection for a
script call itself and disconnect it on any interruption before it goes back); the test is an
expected failure until it does. It fails with redis-py 8.1 and valkey-py 6.2 (with hiredis) and
passes with redis-py 5.0.1 without hiredis (why, not examined yet).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis

from django_redis_locks.core import Backend, Lock
from tests.harness.plugin import MakeServer


# Before the fix, the renewer's thread that redoes the interrupted release reads a wrong
# reply too and dies of it (a second defect: a lane thread should survive any reply).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.xfail(
    strict=False,  # it passes with redis-py 5.0.1 without hiredis (the lowest versions' env)
    reason="open: a reply left unread by a Ctrl-C is read by the next call",
)
def test_ctrl_c_between_a_scripts_request_and_its_reply_leaves_no_reply_for_the_next_call(
    make_server: MakeServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = make_server()
    direct = redis.Redis.from_url(server.url, socket_timeout=5)
    backend = Backend(redis.Redis.from_url(server.url, socket_timeout=5), namespace=namespace)
    try:
        first = Lock("first", client=backend, timeout=30)
        assert first.acquire(blocking=False)  # (a release first: both scripts are on the server)
        first.release()
        assert first.acquire(blocking=False)
        main = threading.get_ident()
        armed = [True]
        parse = redis.Redis.parse_response

        def interrupted(self: Any, connection: Any, command_name: Any, **options: Any) -> Any:
            if armed[0] and threading.get_ident() == main and command_name == "EVALSHA":
                armed[0] = False
                raise KeyboardInterrupt  # a SIGINT landing right after the request went out
            return parse(self, connection, command_name, **options)

        monkeypatch.setattr(redis.Redis, "parse_response", interrupted)
        with pytest.raises(KeyboardInterrupt):
            first.release()
        assert not armed[0]  # the interruption landed where it should

        second = Lock("second", client=backend, timeout=30)
        assert second.acquire(blocking=False)  # its own reply, not the release's
        second.release()
        keys = [first._keys_for(backend).lock, second._keys_for(backend).lock]
        assert not any(direct.hexists(key, "token") for key in keys)  # both free
    finally:
        backend.close()
        direct.close()

"""The undo of an acquire whose reply never came keeps looking for it as long as it said it
would: a request stuck in a dead connection may land late, and the grant it makes then must
be undone, not left for its TTL."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

from django_redis_locks.core import Backend, Lock
from django_redis_locks.core.protocol.holder import new_token
from django_redis_locks.core.protocol.replies import Acquired
from django_redis_locks.core.runtime.acquiring import Request
from django_redis_locks.core.runtime.driver import drive
from django_redis_locks.core.runtime.ownership import current_owner
from django_redis_locks.core.runtime.renewal import renewer
from tests.harness.servers import wait_until
from tests.helpers import is_held

LIFETIME = 6.0  # how long the reclaim is told the unknown grant could appear and live


def test_a_grant_landing_late_in_the_reclaims_lifetime_is_still_undone(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """Nothing is there when the reclaim first looks (the request has not landed); it lands
    two thirds into the lifetime the reclaim was given. The reclaim must still find it."""
    lock = Lock("late-landing", client=backend, timeout=30)
    keys = lock._keys_for(backend)
    token = new_token()
    started = time.monotonic()
    renewer().reclaim(backend, lock._release_call(keys, token), LIFETIME, "a late acquire")
    time.sleep(LIFETIME * 2 / 3)  # the request is still on its way (time passing is the case)
    request = Request(
        backend=backend,
        keys=keys,
        owner=threading.current_thread(),
        token=token,
        ttl=30.0,
        metadata="{}",
    )
    assert isinstance(drive(lock._attempt(request, False), backend), Acquired)  # it lands
    assert is_held(redis_client, keys.lock)
    wait_until(
        lambda: not is_held(redis_client, keys.lock),
        timeout=LIFETIME - (time.monotonic() - started) + 1.5,
        what="the late grant undone within the reclaim's lifetime",
    )
    assert renewer().reclaiming(backend) == 0


def test_a_hold_granted_after_a_refused_late_attempt_is_estimated_from_the_answered_one(
    make_server: Any, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt reaches Redis after its deadline (here the caller stalls between
    computing the deadline and sending: a loaded machine, a long GC pause) and is refused; the
    attempt asked again at once is granted a 300 ms TTL. The hold's end (what the renewer and
    a call that cannot reach Redis go by) used to be estimated from before the refused
    attempt: already past when acquire() returned True."""
    server = make_server()
    backend = Backend(redis.Redis.from_url(server.url, socket_timeout=0.2), namespace=namespace)
    window = backend.request_window
    deadline = Request.deadline
    stalled = [False]

    def stalling(self: Request[Any]) -> Any:
        result = yield from deadline(self)
        if not stalled[0]:
            stalled[0] = True
            time.sleep(window + 0.1)  # the request now reaches Redis past its deadline
        return result

    monkeypatch.setattr(Request, "deadline", stalling)
    lock = Lock("stalled", client=backend, timeout=0.3)
    try:
        assert lock.acquire(blocking=False)
        assert stalled[0]
        believed = lock._require_hold(current_owner()).local_time_left()
        assert 0.1 < believed <= 0.3  # below 0 before the fix
        assert 0.1 < lock.ensure_held() <= 0.3
        lock.release()
    finally:
        backend.close()

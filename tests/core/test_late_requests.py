"""The undo of an acquire whose reply never came keeps looking for it as long as it said it
would: a request stuck in a dead connection may land late, and the grant it makes then must
be undone, not left for its TTL."""

from __future__ import annotations

import threading
import time

import redis

from django_redis_locks.core import Backend, Lock
from django_redis_locks.core.protocol.holder import new_token
from django_redis_locks.core.protocol.replies import Acquired
from django_redis_locks.core.runtime.acquiring import Request
from django_redis_locks.core.runtime.driver import drive
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

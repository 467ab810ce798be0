"""A Backend lives as long as its user keeps it, and the clients it made die with it.

- The renewer keeps a Backend only while it has work on it (renewals, reclaims): code that
  makes a client per task does not keep every such client and its pool.
- A Backend dropped without ``close()`` closes the sync client it made (its sibling or
  twin) and its wake-up subscription, so the collector never finalizes that client's
  sockets unclosed.
"""

from __future__ import annotations

import gc
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from django_redis_locks import Lock, Semaphore
from django_redis_locks.core import Backend
from django_redis_locks.core.protocol.holder import new_token
from django_redis_locks.core.runtime.renewal import renewer
from tests.harness import clients
from tests.harness.servers import wait_until
from tests.helpers import seconds_to_wake_a_waiter


def _connected(client: Any) -> int:
    """How many connections of ``client``'s pool have a socket open."""
    pool = client.connection_pool
    connections = getattr(pool, "_connections", None)  # a BlockingConnectionPool's
    if connections is None:
        connections = [*pool._available_connections, *pool._in_use_connections]
    return sum(1 for connection in connections if connection._sock is not None)


def _collected_without_warnings() -> list[str]:
    """Collect garbage; the ResourceWarnings it raised (unclosed sockets), as text."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


def test_a_backend_whose_renewed_holds_ended_is_not_kept_by_the_renewer(
    redis_server: Any, namespace: str
) -> None:
    with clients.sync_from_url(redis_server.url, socket_timeout=5) as client:
        backend = Backend(client, namespace=namespace)
        lock = Lock("kept-for-a-while", client=backend, timeout=1, auto_renew=True)
        semaphore = Semaphore("slots", 2, client=backend, timeout=1, auto_renew=True)
        rounds = renewer().rounds
        with lock, semaphore:
            wait_until(lambda: renewer().rounds > rounds, timeout=5, what="a renewal")
            assert renewer().renewing(backend) == 2
        backend.close()
        alive: Callable[[], Backend | None] = weakref.ref(backend)
        del backend, lock, semaphore
        gc.collect()
        assert alive() is None, "the renewer still keeps the Backend"


def test_a_backend_with_a_pending_reclaim_is_kept_until_the_reclaim_is_done(
    redis_server: Any, namespace: str
) -> None:
    with clients.sync_from_url(redis_server.url, socket_timeout=5) as client:
        backend = Backend(client, namespace=namespace)
        lock = Lock("reclaimed", client=backend, timeout=30)
        # What an acquire whose reply was lost leaves while its request has not reached Redis
        # (yet): a reclaim of its token, which the renewer sends at once, finds nothing, and
        # looks at again for as long as the grant could appear. (A token that held the lock
        # would be undone by the first look, which may come before the checks below.)
        call = lock._release_call(lock._keys_for(backend), new_token())
        renewer().reclaim(backend, call, 1.0, "lock 'reclaimed'")
        alive: Callable[[], Backend | None] = weakref.ref(backend)
        del backend, lock
        gc.collect()
        assert alive() is not None, "the pending reclaim lost its Backend"
        wait_until(lambda: renewer().reclaiming(alive()) == 0, timeout=10, what="the reclaim")
        gc.collect()
        assert alive() is None, "the renewer still keeps the Backend after the reclaim"


def test_a_backend_dropped_without_close_closes_the_client_it_made(
    redis_server: Any, namespace: str
) -> None:
    with clients.sync_from_url(redis_server.url, socket_timeout=5) as client:
        backend = Backend(client, namespace=namespace)
        sibling = backend.client
        assert sibling is not client  # the library's own sibling, with bounded retries
        # a waiter woken by a release: the wake-up subscription is open on the sibling too
        assert seconds_to_wake_a_waiter(backend, "used") < 1.0
        assert _connected(sibling) >= 2
        del backend
        assert _collected_without_warnings() == []
        assert _connected(sibling) == 0


def test_locks_on_a_dropped_client_leave_no_socket_to_the_collector(redis_server: Any) -> None:
    """``Lock(client=redis_client)`` keeps its Backend on the client; dropping the client
    drops both, and the sibling's sockets are closed, not finalized by the collector."""
    for _ in range(20):
        client = clients.sync_from_url(redis_server.url, socket_timeout=5)
        with Lock("per-task", client=client, timeout=5):
            pass
        client.close()
        del client
    assert _collected_without_warnings() == []

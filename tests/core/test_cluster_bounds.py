"""Cluster calls are bounded: a stopped master fails a call within two socket timeouts, and
closing the Backend closes the connections of the cluster client it made (a full node pool
makes callers wait rather than fail: ``tests/security/test_waiters.py``).

A cluster client given to the library is used through a sibling with the bounded retry policy
(one retry, at once, after a slot-map refresh) and node pools that wait when full. The given
client's own settings (redis-py 8: retries with back-off; pools that raise "Too many
connections") would make a call on a stopped master take many socket timeouts, and callers
beyond a node pool's size fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from django_redis_locks import Lock
from django_redis_locks.core import Backend, LockBackendError, LockError
from tests.harness.plugin import MakeCluster
from tests.harness.servers import RedisCluster, connected_clients, probe_client, wait_until

pytestmark = pytest.mark.cluster

SOCKET_TIMEOUT = 0.5
#: The reference's bound for a call during a failover: two socket timeouts.
BOUND = 2 * SOCKET_TIMEOUT
SLACK = 0.5  # a loaded 2-core machine
#: Each call is made this many times: a cluster client that refreshes its slot map asks its
#: nodes in random order, and a refresh that asks the stopped master first costs a socket
#: timeout more.
ROUNDS = 3


class Owner:
    """One owner of the test's holds (a thread, or one asyncio task: a hold is its caller's)
    that takes a hold, lets the test stop the master, calls on the stopped master, timing
    each call, then, once the master is continued, releases what it holds."""

    def __init__(self, backend: Backend, cluster: RedisCluster) -> None:
        self.held = Lock("stalled", client=backend, timeout=60)
        self.rival = Lock("stalled", client=backend, timeout=60)
        self.other = Lock(name_elsewhere(cluster, backend, "stalled"), client=backend, timeout=60)
        self.holding = threading.Event()
        self.paused = threading.Event()
        self.called = threading.Event()
        self.resumed = threading.Event()
        self.took: dict[str, float] = {}  # operation -> seconds until it raised
        self.unexpected: list[str] = []

    def calls(self, *, asyncio: bool = False) -> list[tuple[str, Callable[[], Any]]]:
        """The calls on the stopped master, ROUNDS times (``asyncio``: coroutine functions)."""
        held, rival = self.held, self.rival
        acquire = rival.aacquire if asyncio else rival.acquire
        extend = held.aextend if asyncio else held.extend
        one_round: list[tuple[str, Callable[[], Any]]] = [
            ("acquire", lambda: acquire(blocking=False)),
            ("extend", lambda: extend(60)),
            ("release", held.arelease if asyncio else held.release),
        ]
        return [(f"{op} {round_}", call) for round_ in range(ROUNDS) for op, call in one_round]

    def record(self, operation: str, started: float, outcome: object) -> None:
        if isinstance(outcome, LockBackendError):
            self.took[operation] = round(time.monotonic() - started, 3)
        else:
            self.unexpected.append(f"{operation}: {outcome!r}")

    def run(self) -> None:
        assert self.held.acquire(blocking=False)
        self.holding.set()
        assert self.paused.wait(10)
        for operation, call in self.calls():
            started = time.monotonic()
            try:
                outcome: object = call()
            except LockError as error:
                outcome = error
            self.record(operation, started, outcome)
        assert self.other.acquire(blocking=False)  # the other masters answer meanwhile
        self.called.set()
        assert self.resumed.wait(10)
        self.other.release()
        # (the stopped master runs the calls it had read once continued: what became of the
        # held lock is not this test's business)
        with contextlib.suppress(LockError):
            self.held.release()

    async def arun(self) -> None:
        assert await self.held.aacquire(blocking=False)
        self.holding.set()
        assert await asyncio.to_thread(self.paused.wait, 10)
        for operation, call in self.calls(asyncio=True):
            started = time.monotonic()
            try:
                outcome: object = await call()
            except LockError as error:
                outcome = error
            self.record(operation, started, outcome)
        assert await self.other.aacquire(blocking=False)
        self.called.set()
        assert await asyncio.to_thread(self.resumed.wait, 10)
        await self.other.arelease()
        with contextlib.suppress(LockError):
            await self.held.arelease()


@pytest.mark.chaos  # SIGSTOPs a master for three rounds: about 25 s, in the chaos tier's CI step
@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_calls_on_a_stopped_master_fail_within_two_socket_timeouts(
    make_cluster: MakeCluster, namespace: str, flavour: str
) -> None:
    # A node timeout longer than the test: the other masters never mark the stopped one
    # failed, so only its own slots are out of reach.
    cluster = make_cluster(3, node_timeout_ms=30_000)
    client = cluster.library_client(
        socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
    )
    backend = Backend(client, namespace=namespace)
    owner = Owner(backend, cluster)
    node = backend.client.get_node_from_key(owner.held._keys_for(backend).lock)
    master = cluster.node_at(node.host, int(node.port))
    result: Future[None] = Future()

    def run() -> None:
        try:
            if flavour == "sync":
                owner.run()
            else:
                asyncio.run(owner.arun())
            result.set_result(None)
        except BaseException as error:
            result.set_exception(error)

    thread = threading.Thread(target=run, name="owner")
    thread.start()
    assert owner.holding.wait(10), result
    master.pause()
    owner.paused.set()
    limit = len(owner.calls()) * (BOUND + SLACK)
    try:
        in_time = owner.called.wait(limit)
    finally:
        master.resume()
        owner.resumed.set()
    thread.join(120)
    assert in_time, f"calls on a stopped master still running after {limit} s: {owner.took}"
    result.result(0)
    print(f"\n{flavour} calls on a stopped master failed after {owner.took} s (bound {BOUND} s)")
    assert not owner.unexpected, owner.unexpected
    assert all(seconds <= BOUND + SLACK for seconds in owner.took.values()), owner.took
    backend.close()
    client.close()


def name_elsewhere(cluster: RedisCluster, backend: Backend, name: str) -> str:
    """A lock name whose keys live on another master than ``name``'s."""
    slot_of = backend.client.keyslot
    owners = cluster.slot_owners()

    def master(lock_name: str) -> object:
        slot = slot_of(Lock(lock_name, client=backend)._keys_for(backend).lock)
        return next(m for (first, last), m in owners.items() if first <= slot <= last)

    return next(f"{name}-{i}" for i in range(1000) if master(f"{name}-{i}") is not master(name))


def test_closing_the_backend_closes_the_connections_of_the_cluster_client_it_made(
    make_cluster: MakeCluster, namespace: str
) -> None:
    """The Backend's bounded sibling of a cluster client is the Backend's own: closing the
    Backend closes its connections on every node, as for a single server."""
    cluster = make_cluster(3)
    admins = [probe_client(node, timeout=5) for node in cluster.nodes]
    baseline = sum(connected_clients(admin) for admin in admins)  # the probes themselves
    client = cluster.library_client(socket_timeout=5)
    backend = Backend(client, namespace=namespace)
    for index in range(30):  # names on every master
        with Lock(f"name-{index}", client=backend, timeout=5):
            pass
    client.close()  # the given client's own connections
    assert sum(connected_clients(admin) for admin in admins) > baseline  # the sibling's
    backend.close()
    wait_until(
        lambda: sum(connected_clients(admin) for admin in admins) == baseline,
        timeout=10,
        what="the Backend's connections closed",
    )
    for admin in admins:
        admin.close()

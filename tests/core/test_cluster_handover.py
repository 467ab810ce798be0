"""On a Cluster, a waiter handed a lock (or admitted to a semaphore) holds it for its own TTL,
whichever node its wake-up subscription is on.

Each process subscribes for wake-ups on the node that serves its own channel, which is seldom
the node of the lock's keys. A hand-over that granted the full TTL only when PUBLISH counted a
subscriber (a count of the node that ran the script only) granted the confirmation window to
such a waiter, while the message, which reaches every node, told it the full TTL: a second
later the lock was free, and a newcomer took it while the waiter believed it held for 30 s.

The check, for each name: H holds, W blocks on it, H releases, W returns holding; 1.5 s later
(past the confirmation window) a newcomer's ``acquire(blocking=False)`` must fail. For a
semaphore of limit ``n``, ``n`` holders hold and one of them releases. The chaos tier runs
the same check after its churn (``tests/chaos/test_cluster_churn.py``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from redis.crc import key_slot

from django_redis_locks import Lock, Semaphore
from django_redis_locks.core import Backend, LockLost
from django_redis_locks.core.protocol.keys import KeySpace
from django_redis_locks.core.protocol.lock_calls import HANDOVER_WINDOW_MS
from tests.harness.servers import (
    RedisCluster,
    RedisServer,
    hub_has_waiter,
    probe_client,
    wait_until,
)

pytestmark = pytest.mark.cluster

TTL = 30.0
#: How long after W returned the newcomer tries: past the confirmation window.
AFTER = 1.5
assert AFTER > HANDOVER_WINDOW_MS / 1000


def node_of(owners: dict[tuple[int, int], RedisServer], key: str) -> RedisServer:
    """The master serving ``key``, from a slot map (``RedisCluster.slot_owners()``)."""
    slot = key_slot(key.encode())
    return next(master for (first, last), master in owners.items() if first <= slot <= last)


def address(server: RedisServer) -> str:
    return f"{server.host}:{server.port}"


def subscribed_at(cluster: RedisCluster, channel: str) -> list[str]:
    """The nodes on which ``channel`` has a subscriber (``PUBSUB CHANNELS`` is per node): a
    check of :func:`node_of`'s answer for a wake-up channel."""
    found = []
    for node in cluster.nodes:
        with probe_client(node) as client:
            if client.pubsub_channels(channel):
                found.append(address(node))
    return found


def names_per_node(cluster: RedisCluster, namespace: str, prefix: str, per_node: int) -> list[str]:
    """``per_node`` names whose keys live on each master (``<prefix>-<index>``), by master."""
    keys = KeySpace(namespace)
    owners = cluster.slot_owners()
    found: dict[str, list[str]] = {address(master): [] for master in owners.values()}
    for index in range(10_000):
        name = f"{prefix}-{index}"
        bucket = found[address(node_of(owners, keys.lock(name).lock))]
        if len(bucket) < per_node:
            bucket.append(name)
        if all(len(names) == per_node for names in found.values()):
            return [name for names in found.values() for name in names]
    raise AssertionError(f"no {per_node} names with prefix {prefix!r} on every master")


def primitive(backend: Backend, name: str, limit: int) -> Lock | Semaphore:
    """A lock (``limit`` 0) or a semaphore of ``limit`` on ``name``, TTL 30 s."""
    if limit == 0:
        return Lock(name, client=backend, timeout=TTL)
    return Semaphore(name, limit, client=backend, timeout=TTL)


@dataclass
class Outcome:
    """One name's check: where its keys and the waiter's subscription are, what happened."""

    name: str
    limit: int  # 0: a lock
    key_node: str
    waiter_node: str
    waiter_held: bool = False
    waited_s: float = 0.0
    newcomer_admitted: bool | None = None
    waiter_release: str = ""  # "released", or "LockLost" (the hold was gone)
    problems: list[str] = field(default_factory=list)

    @property
    def cross_node(self) -> bool:
        return self.key_node != self.waiter_node

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": "lock" if self.limit == 0 else f"semaphore-{self.limit}",
            "cross_node": self.cross_node,
            "waiter_held": self.waiter_held,
            "newcomer_admitted": self.newcomer_admitted,
            "waiter_release": self.waiter_release,
        }


class _Waiter(threading.Thread):
    """W: blocks on the name, holds until told, then releases (a hold is its thread's)."""

    def __init__(self, held: Lock | Semaphore, outcome: Outcome) -> None:
        super().__init__(daemon=True)
        self.held = held
        self.outcome = outcome
        self.returned = threading.Event()
        self.finish = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        try:
            self.outcome.waiter_held = bool(self.held.acquire(timeout=10))
        except Exception as exc:  # reported with the outcome
            self.outcome.problems.append(f"W's acquire raised {exc!r}")
        self.outcome.waited_s = round(time.monotonic() - started, 3)
        self.returned.set()
        self.finish.wait(30)
        if not self.outcome.waiter_held:
            return
        try:
            self.held.release()
            self.outcome.waiter_release = "released"
        except LockLost:
            self.outcome.waiter_release = "LockLost"


def newcomer_check(
    cluster: RedisCluster,
    make_backend: Callable[[], Backend],
    namespace: str,
    targets: Sequence[tuple[str, int]],
) -> list[Outcome]:
    """Run the check on every ``(name, limit)`` at once (limit 0: a lock); see the module doc.

    Holders, the waiters and the newcomers each use a Backend of their own (``make_backend``),
    so the waiters share one wake-up channel, on one node: a name's hand-over crosses nodes
    when its keys live elsewhere.
    """
    owners = cluster.slot_owners()
    keys = KeySpace(namespace)
    holders_backend, waiters_backend, newcomers_backend = (make_backend() for _ in range(3))
    hub = waiters_backend.hub()
    assert hub.wait_ready(10), "the waiters' wake-up subscription is not up"
    waiter_node = address(node_of(owners, hub.channel))
    assert subscribed_at(cluster, hub.channel) == [waiter_node]
    outcomes = [
        Outcome(name, limit, address(node_of(owners, keys.lock(name).lock)), waiter_node)
        for name, limit in targets
    ]
    holders: list[list[Lock | Semaphore]] = []
    for outcome in outcomes:
        group = [
            primitive(holders_backend, outcome.name, outcome.limit)
            for _ in range(max(outcome.limit, 1))
        ]
        for held in group:
            assert held.acquire(blocking=False), f"{outcome.name} is not free"
        holders.append(group)
    waiters = [_Waiter(primitive(waiters_backend, o.name, o.limit), o) for o in outcomes]
    newcomers: list[Lock | Semaphore] = []
    try:
        for waiter in waiters:
            waiter.start()
        for outcome in outcomes:
            kind = keys.lock if outcome.limit == 0 else keys.semaphore
            member = kind(outcome.name).member
            wait_until(
                lambda member=member: hub_has_waiter(waiters_backend, member),  # type: ignore[misc]
                timeout=10,
                what=f"W to wait on {outcome.name}",
            )
        # The hub registers a waiter before its first call queues it: let every W queue
        time.sleep(0.2)
        for group in holders:
            group.pop(0).release()  # H (or one of the semaphore's holders) releases
        for waiter in waiters:
            assert waiter.returned.wait(15), f"W on {waiter.outcome.name} never returned"
        time.sleep(AFTER)  # past the confirmation window: W's hold must still be there
        for outcome in outcomes:
            newcomer = primitive(newcomers_backend, outcome.name, outcome.limit)
            outcome.newcomer_admitted = bool(newcomer.acquire(blocking=False))
            if outcome.newcomer_admitted:
                newcomers.append(newcomer)
    finally:
        for waiter in waiters:
            waiter.finish.set()
        for waiter in waiters:
            waiter.join(timeout=10)
        for newcomer in newcomers:
            with contextlib.suppress(LockLost):
                newcomer.release()
        for group in holders:
            for held in group:
                held.release()
        for made in (holders_backend, waiters_backend, newcomers_backend):
            made.close()
    return outcomes


def refused_everywhere(outcomes: Sequence[Outcome]) -> list[str]:
    """What went wrong, one line per name (empty: every W held, every newcomer was refused,
    every W released its own hold)."""
    wrong = []
    for o in outcomes:
        where = "cross-node" if o.cross_node else "same node"
        if o.problems or not o.waiter_held:
            wrong.append(f"{o.name} ({where}): W did not get it: {o.problems}")
        elif o.newcomer_admitted:
            wrong.append(f"{o.name} ({where}): a newcomer got it {AFTER} s after W returned")
        elif o.waiter_release != "released":
            wrong.append(f"{o.name} ({where}): W's release found {o.waiter_release}")
    return wrong


@pytest.mark.parametrize("limit", [0, 1], ids=["lock", "semaphore-1"])
def test_a_newcomer_is_refused_while_a_waiter_handed_the_lock_across_nodes_holds_it(
    redis_cluster: RedisCluster, namespace: str, limit: int
) -> None:
    """Two names on each master: four hand-overs cross nodes, two do not."""
    made: list[Any] = []

    def make_backend() -> Backend:
        client = redis_cluster.library_client(socket_timeout=5)
        made.append(client)
        return Backend(client, namespace=namespace)

    names = names_per_node(redis_cluster, namespace, "handed", 2)
    try:
        outcomes = newcomer_check(
            redis_cluster, make_backend, namespace, [(n, limit) for n in names]
        )
    finally:
        for client in made:
            client.close()
    assert sum(o.cross_node for o in outcomes) == 4
    wrong = refused_everywhere(outcomes)
    assert not wrong, "\n".join(wrong)

"""Scenario 13: a Redis Cluster master SIGKILLed under churn; the cluster promotes its replica.

Three masters with one replica each (node timeout 1 s). Worker processes (``cycle`` jobs,
configured as a Django project with the reference's ``CLIENT_FACTORY``) churn auto-renewed
locks whose names live on each of the three masters, two workers a name: on each master one
lock without ``wait_for_replicas`` ("plain") and one with ``wait_for_replicas="majority"``
("replicated"). The test process
lists the locks and force-releases a hold before the kill, right after it (before the
promotion), and after the promotion. Hold intervals are on the machine's monotonic clock,
as in scenario 12; fences come from the clock of the master that granted them.

Pass rule: every call made while the master is down fails within the stated bound (two
socket timeouts, plus slack), or within a re-check interval more for a blocking acquire
already waiting; every name is granted again; no two holds of a name overlap; fences granted
after the promotion are larger than those before the kill; during the failover a listing and
a force-release on the dead master's slots fail with ``LockBackendError`` naming the dead
node and the slots; before and after they work.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from django_redis_locks.core import Backend, Lock, LockBackendError
from django_redis_locks.core.protocol.keys import KeySpace
from django_redis_locks.inspection import force_release, list_locks
from tests.chaos.failover import BOUND, SOCKET_TIMEOUT, limit
from tests.chaos.processes import Processes, worker_command
from tests.chaos.sweep import Interval, overlapping_pairs, parse_cycle_logs
from tests.harness.plugin import MakeCluster
from tests.harness.servers import RedisCluster, RedisServer

pytestmark = pytest.mark.chaos


TTL = 2.0
WORKERS_PER_NAME = 2
#: name prefix -> extra cycle options: one lock of each kind on every master
GROUPS: dict[str, dict[str, object]] = {
    "job": {},
    "rjob": {"wait_for_replicas": "majority"},
}


def names_by_master(
    cluster: RedisCluster, namespace: str, prefix: str = "job"
) -> dict[str, RedisServer]:
    """One lock name on each master: name -> the master serving it."""
    keys = KeySpace(namespace)
    owners = cluster.slot_owners()
    found: dict[RedisServer, str] = {}
    for index in range(1000):
        name = f"{prefix}-{index}"
        slot = key_slot(keys.lock(name).lock.encode())
        master = next(m for (first, last), m in owners.items() if first <= slot <= last)
        found.setdefault(master, name)
        if len(found) == len(owners):
            break
    return {name: master for master, name in found.items()}


def try_listing(backend: Backend, name: str, holder_id: str | None) -> dict[str, Any]:
    """List the locks and force-release the hold ``holder_id`` of ``name``."""
    started = time.monotonic()
    outcome: dict[str, Any] = {}
    try:
        listed = list_locks(client=backend, count=1000)
        outcome["listed"] = sorted(info.name for info in listed.items)
        if holder_id is not None:
            outcome["forced"] = force_release(name, holder_id, client=backend, by="chaos")
    except LockBackendError as error:
        outcome["error"] = str(error)
    outcome["seconds"] = round(time.monotonic() - started, 3)
    return outcome


def test_a_killed_master_is_replaced_by_its_replica_under_churn(
    processes: Processes,
    make_cluster: MakeCluster,
    namespace: str,
    tmp_path: Path,
    figures: dict[str, Any],
) -> None:
    cluster = make_cluster(3, replicas=1, node_timeout_ms=1000)
    names: dict[str, RedisServer] = {}
    options: dict[str, dict[str, object]] = {}
    for prefix, extra in GROUPS.items():
        placed = names_by_master(cluster, namespace, prefix)
        assert len(placed) == 3
        names.update(placed)
        options.update(dict.fromkeys(placed, extra))
    login = cluster.acl_user.credentials() if cluster.acl_user is not None else ""
    spec = json.dumps({"kind": "cluster", "nodes": cluster.startup_nodes, "login": login})
    logs: dict[str, list[Path]] = {}
    for name in names:
        for index in range(WORKERS_PER_NAME):
            log = tmp_path / f"{name}-{index}.log"
            logs.setdefault(name, []).append(log)
            processes.start(
                worker_command(
                    "cycle",
                    django=spec,
                    namespace=namespace,
                    name=name,
                    ttl=TTL,
                    socket_timeout=SOCKET_TIMEOUT,
                    work=0.3,
                    step=0.05,
                    acquire_wait=1.0,
                    log=log,
                    stop_file=tmp_path / "stop",
                    **options[name],
                ),
                stderr=subprocess.PIPE,
            )
    deadline = time.monotonic() + 60

    def wait_for_grants(after: float, count: int, what: str) -> None:
        while True:
            granted = [
                sum(1 for h in parse_cycle_logs(paths)[0] if h.start > after)
                for paths in logs.values()
            ]
            if min(granted) >= count:
                return
            assert time.monotonic() < deadline, f"no {count} grants of every name {what}"
            time.sleep(0.1)  # the workers' logs are read again, not a wait for one event

    client = cluster.client(socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT)
    backend = Backend(client, namespace=namespace)
    victim = cluster.nodes[1]
    # The test's own holds, on the victim's slots, to force-release (the workers' holds are
    # left alone: a forced release lets the next holder in while the evicted one works on)
    probe = next(n for n, m in names_by_master(cluster, namespace, "probe").items() if m is victim)
    wait_for_grants(0.0, 3, "before the kill")
    first = Lock(probe, client=backend, timeout=60)
    assert first.acquire(blocking=False)
    before = try_listing(backend, probe, first.holder_id)
    second = Lock(probe, client=backend, timeout=60)
    assert second.acquire(blocking=False)
    fault_at = time.monotonic()
    victim.kill()
    during = try_listing(backend, probe, second.holder_id)
    promoted = cluster.wait_for_promotion(victim)
    promoted_at = time.monotonic()
    wait_for_grants(promoted_at, 3, "after the promotion")
    after_listing = try_listing(backend, probe, second.holder_id)
    (tmp_path / "stop").touch()
    for process in processes.started:
        assert process.wait(timeout=30) == 0, process.stderr.read() if process.stderr else ""
    backend.close()
    client.close()

    results: dict[str, Any] = {}
    problems: list[str] = []
    for name, paths in logs.items():
        holds, failures = parse_cycle_logs(paths)
        failed = [(s, e) for _, s, e in failures if s >= fault_at]
        late = [(op, s, e) for op, s, e in failures if s >= fault_at and e - s > limit(op)]
        waiting = [e for _, s, e in failures if s < fault_at <= e]
        later = [h for h in holds if h.start > fault_at]
        intervals = [Interval(h.start, h.believed_until, str(h.who), h.fence) for h in holds]
        durations = [e - s for s, e in failed]
        earlier = [h.fence for h in holds if h.start < fault_at]
        results[name] = {
            "on_the_killed_master": names[name] is victim,
            "wait_for_replicas": options[name].get("wait_for_replicas"),
            "grants": len(holds),
            "granted_again_after_s": round(later[0].start - fault_at, 3) if later else None,
            "failed_calls": len(failed) + len(waiting),
            "failed_call_s_median": round(statistics.median(durations), 3) if durations else 0,
            "failed_call_s_max": round(max(durations, default=0), 3),
            "overlapping_holds": len(overlapping_pairs(intervals)),
            "fence_before_max": max(earlier, default=0),
            "fence_after_min": min((h.fence for h in later), default=0),
            "holds_reported_lost": sum(
                1 for h in holds if h.lost_noticed is not None and h.lost_noticed > fault_at
            ),
        }
        if late:
            problems.append(f"{name}: calls failed late: {late[:3]}")
        if any(e - fault_at > limit("acquire") for e in waiting):
            problems.append(f"{name}: a waiting call failed late")
    figures.update(
        server=str(cluster.binary),
        socket_timeout_s=SOCKET_TIMEOUT,
        bound_s=BOUND,
        ttl_s=TTL,
        node_timeout_ms=cluster.node_timeout_ms,
        promoted_after_s=round(promoted_at - fault_at, 3),
        promoted_was_replica=promoted is not victim,
        listing_before=before,
        listing_during=during,
        listing_after=after_listing,
        names=results,
    )
    assert not problems, problems
    assert "error" not in before and "error" not in after_listing, (before, after_listing)
    assert f"{victim.host}:{victim.port}" in during.get("error", ""), during
    assert "slots" in during["error"], during
    assert probe in before["listed"] and before["forced"] is True, before
    assert after_listing["forced"] in (True, False), after_listing  # (False: not replicated)
    for name, entry in results.items():
        assert entry["granted_again_after_s"] is not None, name
        assert entry["overlapping_holds"] == 0, name
        assert entry["fence_after_min"] > entry["fence_before_max"], name

"""Scenario 12: Sentinel failover under lock and semaphore churn, the primary SIGKILLed or
SIGSTOPped past ``down-after-milliseconds``.

A primary, two replicas and three Sentinels (quorum 2, down after 1 s). Worker processes
(``cycle`` jobs) are configured as Django projects are, through the three settings the
reference shows in turn: django-redis's ``SentinelClient``, Django's ``RedisCache`` on
redis-py's Sentinel pool, and a ``CLIENT_FACTORY``. They churn an auto-renewed lock without
``wait_for_replicas`` ("plain"), one with ``wait_for_replicas="majority"`` ("replicated")
and a semaphore of limit 2, logging each hold and each failed call with its duration. Then
the primary is SIGKILLed (or SIGSTOPped until the Sentinels promoted a replica, then
continued: it comes back as a primary for a moment, with the clients that still had idle
connections to it, until the Sentinels make it a replica).

The clock: hold intervals are logged on the machine's monotonic clock, which every worker and
every server here share (one machine); the servers expire holds and hand out fences on their
own clock (``TIME`` in the scripts), the same machine's. Across machines the comparison that
holds is the fence, taken from the granting server's clock: after a failover the new
primary's fences must be larger than the old one's, checked below.

Pass rule: every call made during the failover fails within the stated bound (two socket
timeouts, plus slack for a loaded machine), or within a re-check interval more for a blocking
acquire already waiting; acquires succeed again on every name; the replicated lock's holds
never overlap; fences granted after the failover are larger than those before it. Measured:
the time from the fault until each name is granted again, the calls failed meanwhile and how
long each took to fail, overlapping holds of the plain lock, the semaphore's peak, holds
reported lost.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.failover import BOUND, SOCKET_TIMEOUT, limit
from tests.chaos.processes import Processes, worker_command
from tests.chaos.sweep import Interval, overlapping_pairs, parse_cycle_logs, peak_concurrency
from tests.harness.django_caches import KINDS
from tests.harness.plugin import MakeSentinelGroup
from tests.harness.sentinel import SentinelGroup

pytestmark = pytest.mark.chaos


TTL = 2.0
LIMIT = 2
#: name -> (workers, extra cycle options)
GROUPS: dict[str, tuple[int, dict[str, object]]] = {
    "plain": (2, {}),
    "replicated": (2, {"wait_for_replicas": "majority"}),
    "slots": (3, {"limit": LIMIT}),
}


def start_workers(
    processes: Processes, group: SentinelGroup, namespace: str, tmp_path: Path
) -> dict[str, list[Path]]:
    login = group.acl_user.credentials() if group.acl_user is not None else ""
    logs: dict[str, list[Path]] = {}
    index = 0
    for name, (count, options) in GROUPS.items():
        for _ in range(count):
            log = tmp_path / f"{name}-{index}.log"
            spec = {
                "kind": KINDS[index % len(KINDS)],
                "service": group.service,
                "sentinels": group.sentinel_addresses,
                "login": login,
            }
            processes.start(
                worker_command(
                    "cycle",
                    django=json.dumps(spec),
                    namespace=namespace,
                    name=name,
                    ttl=TTL,
                    socket_timeout=SOCKET_TIMEOUT,
                    work=0.3,
                    step=0.05,
                    acquire_wait=1.0,
                    log=log,
                    stop_file=tmp_path / "stop",
                    **options,
                ),
                stderr=subprocess.PIPE,
            )
            logs.setdefault(name, []).append(log)
            index += 1
    return logs


def grants_after(logs: dict[str, list[Path]], after: float) -> dict[str, int]:
    return {
        name: sum(1 for hold in parse_cycle_logs(paths)[0] if hold.start > after)
        for name, paths in logs.items()
    }


@pytest.mark.parametrize("fault", ["sigkill", "sigstop"])
def test_sentinel_failover_under_churn(
    processes: Processes,
    make_sentinel_group: MakeSentinelGroup,
    namespace: str,
    tmp_path: Path,
    figures: dict[str, Any],
    fault: str,
) -> None:
    group = make_sentinel_group(down_after_ms=1000)
    logs = start_workers(processes, group, namespace, tmp_path)
    deadline = time.monotonic() + 60

    def wait_for_grants(after: float, count: int, what: str) -> None:
        while min(grants_after(logs, after).values()) < count:
            assert time.monotonic() < deadline, f"no {count} grants of every name {what}"
            time.sleep(0.1)  # the workers' logs are read again, not a wait for one event

    wait_for_grants(0.0, 3, "before the fault")
    old = group.primary()
    fault_at = time.monotonic()
    if fault == "sigkill":
        old.kill()
    else:
        old.pause()
    new = group.wait_for_failover(old)
    promoted_at = time.monotonic()
    resumed_at = None
    if fault == "sigstop":
        resumed_at = time.monotonic()
        old.resume()  # a primary again, for the clients still connected, until demoted
    wait_for_grants(promoted_at, 3, "after the failover")
    (tmp_path / "stop").touch()
    for process in processes.started:
        assert process.wait(timeout=30) == 0, process.stderr.read() if process.stderr else ""

    results: dict[str, Any] = {}
    problems: list[str] = []
    for name, paths in logs.items():
        holds, failures = parse_cycle_logs(paths)
        during = [(op, s, e) for op, s, e in failures if s >= fault_at]
        waiting = [(op, s, e) for op, s, e in failures if s < fault_at <= e]
        after = [hold for hold in holds if hold.start > fault_at]
        intervals = [Interval(h.start, h.believed_until, str(h.who), h.fence) for h in holds]
        durations = [e - s for _, s, e in during]
        entry: dict[str, Any] = {
            "grants": len(holds),
            "granted_again_after_s": round(after[0].start - fault_at, 3) if after else None,
            "failed_calls": len(during) + len(waiting),
            "failed_call_s_median": round(statistics.median(durations), 3) if durations else 0,
            "failed_call_s_max": round(max(durations, default=0), 3),
            "waiting_calls_failed_after_s_max": round(
                max((e - fault_at for *_, e in waiting), default=0), 3
            ),
            "holds_reported_lost": sum(
                1 for h in holds if h.lost_noticed is not None and h.lost_noticed > fault_at
            ),
        }
        if name == "slots":
            entry["peak_holders"] = peak_concurrency(intervals)
        else:
            before = [h.fence for h in holds if h.start < fault_at]
            entry["overlapping_holds"] = len(overlapping_pairs(intervals))
            entry["fence_before_max"] = max(before, default=0)
            entry["fence_after_min"] = min((h.fence for h in after), default=0)
            if not entry["fence_after_min"] > entry["fence_before_max"]:
                problems.append(f"{name}: a fence after the failover is not larger")
        late = [(op, s, e) for op, s, e in during if e - s > limit(op)]
        if late:
            problems.append(f"{name}: calls failed late: {late[:3]}")
        if any(e - fault_at > limit("acquire") for *_, e in waiting):
            problems.append(f"{name}: a waiting call failed late")
        results[name] = entry
    figures.update(
        fault=fault,
        server=str(group.binary),
        socket_timeout_s=SOCKET_TIMEOUT,
        bound_s=BOUND,
        ttl_s=TTL,
        down_after_ms=group.down_after_ms,
        promoted_after_s=round(promoted_at - fault_at, 3),
        resumed_after_s=round(resumed_at - fault_at, 3) if resumed_at else None,
        new_primary_was_replica=new is not old,
        names=results,
    )
    assert not problems, problems
    assert results["replicated"]["overlapping_holds"] == 0
    assert all(entry["granted_again_after_s"] is not None for entry in results.values())

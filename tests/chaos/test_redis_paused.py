"""Scenario 3: Redis stopped (SIGSTOP) for twice the TTL while worker processes hold and wait
for an auto-renewed lock (``cycle`` jobs), then continued.

Pass rule:

- every call that fails does so with ``LockBackendError`` within the bound: one socket
  timeout (plus slack) for a call made while Redis is stopped; a blocking acquire that was
  already waiting fails at its next attempt, within one re-check interval more;
- a holder working when Redis stopped learns that it may have lost the hold: its ``on_lost``
  fires once its local expiry has passed (not before), within a socket timeout and a renewal
  retry after it, and while Redis is still stopped;
- after SIGCONT the workers acquire again;
- no double grant: fences increase with the grants, and a sweep over the hold intervals
  (from the grant until the release, or until the holder learned of the loss) finds no
  overlap.
"""

from __future__ import annotations

import itertools
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from django_redis_locks.core import Lock
from tests.chaos.processes import Processes, worker_command
from tests.chaos.sweep import Interval, log_lines, overlapping_pairs, parse_cycle_logs
from tests.harness.servers import wait_until

pytestmark = pytest.mark.chaos

TTL = 1.0
SOCKET_TIMEOUT = 0.5
SLACK = 0.5  # a loaded 2-core machine
PAUSE = 2 * TTL
WORKERS = 4
WORK = 1.2 * TTL  # longer than the TTL: holds live on renewals
RENEW_RETRY = min(0.25, TTL / 10)  # the renewer's retry after a failed round


def test_a_stopped_redis_fails_calls_in_bound_holders_learn_of_it_and_work_resumes(
    processes: Processes,
    make_server: Any,
    namespace: str,
    tmp_path: Path,
    figures: dict[str, Any],
) -> None:
    server = make_server()
    stop_file = tmp_path / "stop"
    logs = [tmp_path / f"worker-{index}.log" for index in range(WORKERS)]
    workers = [
        processes.start(
            worker_command(
                "cycle",
                url=server.url,
                namespace=namespace,
                name="stalled",
                ttl=TTL,
                socket_timeout=SOCKET_TIMEOUT,
                work=WORK,
                step=0.05,
                acquire_wait=5,
                log=log,
                stop_file=stop_file,
            ),
            stderr=subprocess.PIPE,
        )
        for log in logs
    ]

    def grants(after: float = 0.0) -> int:
        return sum(
            1
            for log in logs
            for fields in log_lines(log)
            if fields[0] == "S" and int(fields[1]) / 1e9 > after
        )

    wait_until(lambda: grants() >= 3, timeout=60, what="three grants before the stall")
    stopped_at = time.monotonic()
    server.pause()
    time.sleep(PAUSE)  # the length of the stall itself
    resumed_at = time.monotonic()
    server.resume()
    wait_until(lambda: grants(resumed_at) >= 3, timeout=30, what="three grants after the stall")
    stop_file.touch()
    for worker in workers:
        assert worker.wait(timeout=30) == 0, worker.stderr.read() if worker.stderr else ""

    holds, failures = parse_cycle_logs(logs)
    during = [(op, s, e) for op, s, e in failures if s >= stopped_at]
    waiting = [(op, s, e) for op, s, e in failures if s < stopped_at]
    caught = [h for h in holds if h.start < stopped_at and (h.end is None or h.end > stopped_at)]
    after = [h for h in holds if h.start > resumed_at]
    intervals = [Interval(h.start, h.believed_until, str(h.who), h.fence) for h in holds]
    overlaps = overlapping_pairs(intervals)
    noticed = [h.lost_noticed - h.local_expiry for h in caught if h.lost_noticed and h.local_expiry]
    figures.update(
        ttl_s=TTL,
        socket_timeout_s=SOCKET_TIMEOUT,
        stall_s=PAUSE,
        grants=len(holds),
        failed_calls={
            op: sum(1 for f in failures if f[0] == op) for op in ("acquire", "ensure", "release")
        },
        slowest_failure_during_the_stall_s=round(max((e - s for _, s, e in during), default=0), 3),
        failure_of_calls_already_waiting_after_the_stall_began_s=round(
            max((e - stopped_at for _, _, e in waiting), default=0), 3
        ),
        holds_caught_by_the_stall=len(caught),
        loss_noticed_after_local_expiry_s=[round(n, 3) for n in noticed],
        first_grant_after_the_stall_s=round(after[0].start - resumed_at, 3) if after else None,
        overlapping_intervals=len(overlaps),
    )
    assert during, "no call was made while Redis was stopped"
    assert all(e - s <= SOCKET_TIMEOUT + SLACK for _, s, e in during)
    assert all(e - stopped_at <= Lock.recheck_seconds + SOCKET_TIMEOUT + SLACK for *_, e in waiting)
    assert caught, "no hold was live when Redis stopped"
    for hold in caught:
        assert hold.lost_noticed is not None and hold.local_expiry is not None, hold
        assert hold.local_expiry <= hold.lost_noticed <= resumed_at
        assert hold.lost_noticed - hold.local_expiry <= SOCKET_TIMEOUT + RENEW_RETRY + SLACK
    assert len(after) >= 3
    fences = [hold.fence for hold in holds]
    assert all(b > a for a, b in itertools.pairwise(fences)), "fences out of order"
    assert not overlaps, f"two holds overlapped: {overlaps[:3]}"

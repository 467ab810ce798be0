"""Scenario 11: the network is cut while processes take and give back a lock.

Worker processes (``cycle`` jobs, TTL 10 s, socket timeout 0.5 s) take the lock, hold it a
few ms and release it, again and again, through a TCP proxy; like web requests, each attempt
uses a new Lock object, and one that fails is not retried. At random moments the proxy cuts
the network as the reply of a grant is on its way (the acquire ran, nobody heard of it) and
keeps it cut for ``PARTITION`` seconds. That acquire left a hold nobody knows of; the library
undoes it as soon as Redis answers again.

Pass rule: no two logged holds overlap; after each heal someone holds the lock again within
``RECOVERY`` seconds (an orphaned hold would keep the name for its 10 s TTL).
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.chaos.processes import Processes, worker_command
from tests.chaos.sweep import Interval, log_lines, overlapping_pairs
from tests.harness.proxy import ReplyProxy
from tests.harness.servers import wait_until

pytestmark = pytest.mark.chaos

TTL = 10.0
WORKERS = 4
PARTITIONS = 6
PARTITION = 1.5  # seconds the network stays cut
RECOVERY = 3.0  # after a heal: reconnect back-off (1 s), socket timeouts, a re-check
#: How the reply of a grant starts (lock_acquire.lua): a five-element array, first 1.
GRANT = b"*5\r\n:1\r\n"


def through(url: str, proxy: ReplyProxy) -> str:
    """``url`` (login included) pointed at the proxy."""
    parts = urlsplit(url)
    login = parts.netloc.rpartition("@")[0]
    netloc = f"{login}@{proxy.host}:{proxy.port}" if login else f"{proxy.host}:{proxy.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def test_acquires_cut_off_by_a_partition_leave_the_lock_free_soon_after_it_heals(
    processes: Processes,
    redis_server: Any,
    namespace: str,
    tmp_path: Path,
    figures: dict[str, Any],
    rng: random.Random,
) -> None:
    stop_file = tmp_path / "stop"
    logs = [tmp_path / f"worker-{i}.log" for i in range(WORKERS)]
    heals: list[float] = []
    with ReplyProxy(redis_server.host, redis_server.port) as proxy:
        for log in logs:
            command = worker_command(
                "cycle",
                url=through(redis_server.url, proxy),
                namespace=namespace,
                name="cut",
                ttl=TTL,
                socket_timeout=0.5,
                work=0.01,
                step=0.005,
                acquire_wait=0,  # tries: every success is a grant's reply
                log=log,
                stop_file=stop_file,
                fresh=True,
            )
            processes.start(command)
        time.sleep(2.0)  # the workers start and churn
        for _ in range(PARTITIONS):
            severed = proxy.severed
            with proxy.partition(after_next_reply=True, starting=GRANT):
                wait_until(
                    lambda before=severed: bool(proxy.severed > before),  # type: ignore[misc]
                    timeout=10,
                    what="a cut grant",
                )
                time.sleep(PARTITION)  # the network stays cut (this is the scenario)
            heals.append(time.monotonic_ns() / 1e9)
            time.sleep(rng.uniform(RECOVERY + 0.5, RECOVERY + 1.5))  # churn between cuts
        stop_file.touch()
        for process in processes.started:
            assert process.wait(timeout=60) == 0
    intervals: list[Interval] = []
    failures = 0
    for log in logs:
        lines = log_lines(log)
        start: float | None = None
        for fields in lines[1:]:
            if fields[0] == "S":
                start = int(fields[1]) / 1e9
            elif fields[0] == "E" and start is not None:
                intervals.append(Interval(start, int(fields[1]) / 1e9, log.stem))
                start = None
            elif fields[0] == "F":
                failures += 1
    starts = sorted(interval.start for interval in intervals)
    recoveries = []
    for healed in heals:
        later = [s for s in starts if s > healed]
        recoveries.append(round(later[0] - healed, 3) if later else None)
    overlaps = overlapping_pairs(intervals)
    figures.update(
        ttl_s=TTL,
        workers=WORKERS,
        partitions=len(heals),
        partition_s=PARTITION,
        holds=len(intervals),
        calls_failed=failures,
        held_again_after_heal_s=recoveries,
        overlapping_intervals=len(overlaps),
    )
    assert not overlaps, f"overlapping holds: {overlaps[:5]}"
    assert all(r is not None and r < RECOVERY for r in recoveries), recoveries

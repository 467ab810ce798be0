"""The demo's log: every holder appends a JSON line, and the runner adds the lines up.

Holders (the task, the views, the semaphore-limited command) call :func:`record_hold` inside
their lock or slot; the demo's workers call :func:`record` for what they saw (a skipped task,
an HTTP status). The lines go to the file named by ``$DEMO_EVENTS``, appended with one
``write()`` each, so processes and threads never mix their lines; without ``$DEMO_EVENTS``
(``manage.py`` run by hand) nothing is written.

Hold intervals are ``time.monotonic()`` readings taken after the acquire and before the
release. On Linux that clock is one system-wide clock for every process, so intervals of
different processes can be compared: more than ``limit`` of them open at one instant is a
violation of mutual exclusion. A hold force-released from the admin (or ``manage.py
redis_locks``) breaks mutual exclusion on purpose: the signal receivers below log force
releases and lost holds, and the holds open at a force release are left out of the check.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def record(**event: Any) -> None:
    """Append one event (a JSON object) to the demo's log, if there is one."""
    path = os.environ.get("DEMO_EVENTS")
    if not path:
        return
    line = (json.dumps({**event, "pid": os.getpid()}) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@contextmanager
def record_hold(kind: str, name: str, *, limit: int = 1, by: str) -> Iterator[None]:
    """Log the interval of the block as a hold of lock or semaphore ``name`` (use it inside)."""
    start = time.monotonic()
    yield
    end = time.monotonic()
    record(type="hold", kind=kind, name=name, limit=limit, by=by, start=start, end=end)


def record_force_release(sender: type, *, kind: str, name: str, **kwargs: Any) -> None:
    """Receiver of ``hold_force_released``: log when a hold was evicted."""
    record(type="force_release", kind=kind, name=name, time=time.monotonic())


def record_lost(sender: type, *, kind: str, name: str, reason: str | None, **kwargs: Any) -> None:
    """Receiver of ``hold_lost``: log a holder that found its hold gone."""
    record(type="lost", kind=kind, name=name, reason=reason)


def peak_and_violations(intervals: list[tuple[float, float]], limit: int) -> tuple[int, int]:
    """Sweep over (start, end) intervals: the most open at one instant, and how many starts
    found ``limit`` others already open (touching intervals do not overlap)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    open_now = peak = violations = 0
    for _, step in events:  # at equal times, -1 sorts first
        open_now += step
        peak = max(peak, open_now)
        violations += step == 1 and open_now > limit
    return peak, violations


@dataclass
class Tally:
    """What the demo's log says so far; :meth:`read` takes in the lines added since."""

    path: Path
    holds: dict[tuple[str, str], list[tuple[float, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    limits: dict[tuple[str, str], int] = field(default_factory=dict)
    runs: Counter[str] = field(default_factory=Counter)  # holds by who held: task, command...
    skipped: int = 0  # task calls that found the lock taken
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)  # (view, status)
    without_retry_after: int = 0  # 409 answers lacking Retry-After
    errors: list[str] = field(default_factory=list)
    force_releases: list[tuple[str, str, float]] = field(default_factory=list)
    lost: int = 0  # holders that found their hold gone
    _offset: int = 0

    def read(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as file:
            file.seek(self._offset)
            data = file.read()
        complete = data[: data.rfind(b"\n") + 1]  # a line being written waits for next time
        self._offset += len(complete)
        for line in complete.splitlines():
            self.add(json.loads(line))

    def add(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "hold":
            key = (event["kind"], event["name"])
            self.holds[key].append((event["start"], event["end"]))
            self.limits[key] = event["limit"]
            self.runs[event["by"]] += 1
        elif kind == "skip":
            self.skipped += 1
        elif kind == "request":
            view, status = event["view"], event["status"]
            self.statuses[view, status] += 1
            if status == 409 and not event.get("retry_after"):
                self.without_retry_after += 1
            elif status not in (200, 409):
                self.errors.append(f"{view} answered {status}")
        elif kind == "force_release":
            self.force_releases.append((event["kind"], event["name"], event["time"]))
        elif kind == "lost":
            self.lost += 1
        else:
            self.errors.append(f"{event.get('by')} (pid {event['pid']}): {event.get('detail')}")

    def answered(self, status: int, view: str | None = None) -> int:
        return sum(n for (v, s), n in self.statuses.items() if s == status and view in (None, v))

    def concurrency(self) -> dict[tuple[str, str], tuple[int, int, int]]:
        """(kind, name) -> (max concurrency, limit, violations).

        Holds open at a force release of their name (or up to 0.5 s before it was logged)
        are left out: their holders were evicted and ran on without exclusion.
        """
        result = {}
        for key, intervals in sorted(self.holds.items()):
            evicted = [t for kind, name, t in self.force_releases if (kind, name) == key]
            kept = [
                (s, e) for s, e in intervals if not any(s <= t and e >= t - 0.5 for t in evicted)
            ]
            limit = self.limits[key]
            peak, violations = peak_and_violations(kept, limit)
            result[key] = (peak, limit, violations)
        return result

    def violations(self) -> int:
        return sum(bad for _, _, bad in self.concurrency().values())

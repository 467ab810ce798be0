"""Hold intervals from worker logs, and the sweep that finds overlaps (python-redis-lock's
``test_no_overlap`` style).

A logged interval starts after the acquire returned and ends before the release was sent, so
it lies inside the real hold: two logged intervals that overlap are two real holds that
overlapped, never an artefact of logging. A holder killed (or stopped) while holding logs no
end; its hold really lasts until its TTL runs out, counted from the grant, which came a little
before the logged start. Its interval is therefore taken to end at ``start + ttl - grace``,
where ``grace`` bounds the latency between the grant and the log line.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Interval:
    """One hold as a worker logged it (seconds on one clock shared by every worker)."""

    start: float
    end: float
    who: str
    fence: int | None = None
    how: str = "released"  # released, killed, stopped, lost


def log_lines(path: Path) -> list[list[str]]:
    """The log's lines, split into fields; a last line cut short by a SIGKILL is dropped."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    lines = text.split("\n")
    if lines and lines[-1] != "":
        lines = lines[:-1]  # no newline yet: the process died writing it
    return [line.split(" ") for line in lines if line]


def overlapping_pairs(intervals: Iterable[Interval]) -> list[tuple[Interval, Interval]]:
    """Every pair of intervals that share a moment (touching ends do not count)."""
    ordered = sorted(intervals, key=lambda i: (i.start, i.end))
    pairs: list[tuple[Interval, Interval]] = []
    active: list[Interval] = []
    for interval in ordered:
        active = [a for a in active if a.end > interval.start]
        pairs.extend((a, interval) for a in active)
        active.append(interval)
    return pairs


def peak_concurrency(intervals: Iterable[Interval]) -> int:
    """The most intervals live at one moment (an end and a start at the same time: not both)."""
    events = sorted([(i.start, 1) for i in intervals] + [(i.end, -1) for i in intervals])
    inside = peak = 0
    for _, step in events:  # at equal times an end (-1) sorts before a start (+1)
        inside += step
        peak = max(peak, inside)
    return peak


def first_time_at(intervals: Sequence[Interval], count: int, after: float) -> float | None:
    """The first moment after ``after`` at which ``count`` of the intervals are live at once."""
    events = sorted([(i.start, 1) for i in intervals] + [(i.end, -1) for i in intervals])
    inside = 0
    for moment, step in events:
        inside += step
        if moment > after and inside >= count:
            return moment
    return None


@dataclass
class Hold:
    who: int
    start: float
    fence: int
    end: float | None = None  # work done, before the release
    lost_noticed: float | None = None  # on_lost (O) or ensure_held's LockLost (X)
    local_expiry: float | None = None

    @property
    def believed_until(self) -> float:
        ends = [t for t in (self.end, self.lost_noticed) if t is not None]
        assert ends, f"hold {self} never ended"
        return min(ends)


def parse_cycle_log(log: Path, who: int) -> tuple[list[Hold], list[tuple[str, float, float]]]:
    """The holds and the failed calls (operation, start, end) a ``cycle`` worker logged."""
    holds: list[Hold] = []
    failures: list[tuple[str, float, float]] = []
    for fields in log_lines(log)[1:]:
        kind, at = fields[0], int(fields[1]) / 1e9 if fields[0] != "F" else 0.0
        if kind == "S":
            holds.append(Hold(who, at, int(fields[2])))
        elif kind == "E":
            holds[-1].end = at
        elif kind in ("X", "O"):
            hold = holds[-1]
            if hold.lost_noticed is None or at < hold.lost_noticed:
                hold.lost_noticed = at
            if kind == "O" and int(fields[2]) > 0:
                hold.local_expiry = int(fields[2]) / 1e9
        elif kind == "F":
            failures.append((fields[1], int(fields[2]) / 1e9, int(fields[3]) / 1e9))
    return holds, failures


def parse_cycle_logs(logs: Sequence[Path]) -> tuple[list[Hold], list[tuple[str, float, float]]]:
    """The holds (by start) and failed calls of several ``cycle`` workers, each its index."""
    holds: list[Hold] = []
    failures: list[tuple[str, float, float]] = []
    for who, log in enumerate(logs):
        worker_holds, worker_failures = parse_cycle_log(log, who)
        holds += worker_holds
        failures += worker_failures
    holds.sort(key=lambda hold: hold.start)
    return holds, failures

"""Reading the runs the critical sections logged, and sweeping their intervals for overlap
(:func:`peak`: the most runs inside at one instant)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.testapp.runner import peak

__all__ = ["overlaps", "peak", "records", "spans"]

Span = tuple[float, float]


def records(log: Path) -> list[dict[str, Any]]:
    """Every line logged so far (none if the file does not exist yet)."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def spans(log: Path, name: str) -> list[Span]:
    """The (start, end) of every run logged for lock ``name``, sorted by start."""
    return sorted((r["start"], r["end"]) for r in records(log) if r["name"] == name)


def overlaps(sorted_spans: list[Span]) -> list[tuple[Span, Span]]:
    """The pairs of consecutive runs where the next started before the previous ended
    (ends are carried: a run overlapping any earlier one is caught)."""
    found = []
    latest: Span | None = None
    for span in sorted_spans:
        if latest is not None and span[0] < latest[1]:
            found.append((latest, span))
        if latest is None or span[1] > latest[1]:
            latest = span
    return found

"""Small statistics helpers: percentiles with linear interpolation, medians of medians."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

__all__ = ["median", "percentile", "ratio", "spread", "summarize"]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, interpolated between ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    fraction = position - low
    return float(ordered[low] + (ordered[high] - ordered[low]) * fraction)


def median(values: Iterable[float]) -> float:
    data = list(values)
    return float(statistics.median(data)) if data else math.nan


def spread(values: Iterable[float]) -> float:
    """Relative half-range of repeated measurements: (max - min) / 2 / median."""
    data = list(values)
    if not data:
        return math.nan
    middle = median(data)
    return (max(data) - min(data)) / 2 / middle if middle else math.nan


def ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """Median, p99 and a few more percentiles of one repetition's samples."""
    return {
        "n": float(len(samples)),
        "p50": percentile(samples, 50),
        "p90": percentile(samples, 90),
        "p99": percentile(samples, 99),
        "max": float(max(samples)) if samples else math.nan,
        "mean": statistics.fmean(samples) if samples else math.nan,
    }

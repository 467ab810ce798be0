"""One module per measurement; :data:`MODULES` lists them in run order.

A measurement module defines ``MEASUREMENT = Measurement(...)`` with

- ``run(ctx) -> dict``: performs the measurement (in the worker pool) and returns a
  JSON-serialisable result, which is also stored in ``results.json``;
- ``render(result, out_dir) -> str``: the markdown section for ``results.md``, writing any
  plots into ``out_dir``. Rendering needs only the stored result (``--render-only``);
- ``targets(result)``: the issue's targets as (target, measured, met) rows, gathered into
  the verdict table at the top of ``results.md``.

To add one, write a module like these and append its import path to :data:`MODULES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.context import Context, Settings

__all__ = ["MODULES", "Measurement", "Verdict", "load"]

MODULES = (
    "benchmarks.measurements.uncontended",
    "benchmarks.measurements.table_11_2",
    "benchmarks.measurements.blocking",
    "benchmarks.measurements.handoff",
    "benchmarks.measurements.semaphore",
    "benchmarks.measurements.inspection",
    "benchmarks.measurements.decorator",
    "benchmarks.measurements.footprint",
)


#: (target, what was measured, met?); met is None when the run could not tell.
Verdict = tuple[str, str, bool | None]


@dataclass(frozen=True)
class Measurement:
    """A named measurement: how to run it and how to show its result."""

    name: str
    title: str
    item: str  # where it comes from, e.g. "issue 6, item 1"
    run: Callable[[Context], dict[str, Any]]
    render: Callable[[dict[str, Any], Path], str]
    targets: Callable[[dict[str, Any]], list[Verdict]] = lambda result: []
    workers: Callable[[Settings], int] = lambda settings: 1  # worker processes it needs


def load() -> dict[str, Measurement]:
    """Every measurement, by name, in run order."""
    found: dict[str, Measurement] = {}
    for module in MODULES:
        measurement: Measurement = importlib.import_module(module).MEASUREMENT
        found[measurement.name] = measurement
    return found

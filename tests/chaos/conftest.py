"""Fixtures of the fault-injection suite: the figures each scenario logs for CI to keep.

Each test that takes the ``figures`` fixture fills a dict with what it measured, before it
asserts its pass rule; at teardown one JSON object per scenario is appended (one per line) to
``$DRL_ARTIFACTS/chaos-figures.json`` (default ``test-artifacts/``), with the outcome, the
run time and the server, and the figures of the run are printed in the terminal summary.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from tests.chaos.processes import Processes
from tests.harness.figures import FiguresFile

FIGURES = FiguresFile("chaos")

_reports = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    item.stash.setdefault(_reports, {})[report.when] = report
    return report


@pytest.fixture
def processes() -> Iterator[Processes]:
    """Start worker processes; the ones still alive at teardown are continued and killed."""
    started = Processes()
    yield started
    started.close()


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """A dict for the scenario's measured figures, appended to the figures file at teardown."""
    values: dict[str, Any] = {}
    started = time.monotonic()
    yield values
    reports = request.node.stash.get(_reports, {})
    call = reports.get("call")
    outcome = call.outcome if call is not None else "error"
    if call is not None and hasattr(call, "wasxfail"):  # a known bug's test (xfail)
        outcome = "xpassed" if call.passed else "xfailed"
    FIGURES.append(
        {
            "scenario": request.node.nodeid,
            "outcome": outcome,
            "seconds": round(time.monotonic() - started, 2),
            "figures": values,
        }
    )


@pytest.fixture
def rng(figures: dict[str, Any]) -> random.Random:
    """The scenario's random choices: seeded from $DRL_CHAOS_SEED if set, the seed logged."""
    seed = int(os.environ.get("DRL_CHAOS_SEED") or random.randrange(1 << 32))
    figures["seed"] = seed
    return random.Random(seed)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FIGURES.written:
        return
    terminalreporter.section("chaos figures")
    for record in FIGURES.written:
        terminalreporter.write_line(
            f"{record['scenario']} [{record['outcome']}, {record['seconds']} s]: "
            + json.dumps(record["figures"])
        )
    terminalreporter.write_line(f"(appended to {FIGURES.path})")

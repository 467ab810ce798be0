"""Helpers shared by the measurement tasks (worker side) and renderers (parent side)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis

from benchmarks.registry import Impl, LockAdapter, get
from benchmarks.server import CommandStats
from benchmarks.stats import summarize
from django_redis_locks.core import Backend
from django_redis_locks.core.protocol import lock_calls as lock_protocol
from django_redis_locks.core.protocol.holder import holder_metadata, metadata_json, new_token

__all__ = [
    "bound_row",
    "busy_wait_us",
    "describe",
    "fill_locks",
    "fmt",
    "label",
    "lean_rows",
    "open_adapter",
    "table",
]

#: Acquire scripts per pipeline when filling a server with live locks.
FILL_BATCH = 1000


def open_adapter(params: dict[str, Any]) -> tuple[Impl, redis.Redis, LockAdapter]:
    """In a worker: the implementation named in ``params``, a fresh client and an adapter."""
    impl = get(params["impl"])
    client = redis.Redis(host=params["host"], port=params["port"], socket_timeout=30)
    adapter = impl.make(client, params["name"], params["ttl"])
    return impl, client, adapter


def label(name: str) -> str:
    """How tables name an implementation; stored results may name one no longer registered."""
    try:
        return f"{get(name).label} (`{name}`)"
    except KeyError:
        return f"`{name}`"


def describe(name: str) -> tuple[str, str]:
    """(label, how it waits) for tables; tolerant of unregistered names like :func:`label`."""
    try:
        impl = get(name)
    except KeyError:
        return f"`{name}`", ""
    return f"{impl.label} (`{name}`)", impl.waits_by


def busy_wait_us(microseconds: float) -> None:
    """A critical section that keeps the CPU busy (as real work would) for ``microseconds``."""
    if microseconds <= 0:
        return
    end = time.perf_counter_ns() + int(microseconds * 1000)
    while time.perf_counter_ns() < end:
        pass


def fmt(value: float, digits: int = 0, suffix: str = "") -> str:
    """A number for a table: thousands separators, ``-`` for NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}{suffix}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    """A markdown table; ``align`` is one letter per column (l/r), default l then r."""
    spec = align or "l" + "r" * (len(header) - 1)
    rule = ["---:" if a == "r" else "---" for a in spec]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def lean_rows(
    what: str, ours: dict[str, Any], impls: dict[str, Any], target: float
) -> list[tuple[str, str, bool]]:
    """The verdict on the commands our scripts run per uncontended cycle (what the server
    executed less the EVALSHAs sent), counted, not timed."""
    inside = ours["server_commands_per_cycle"] - ours["sent_per_cycle"]
    return [
        (
            f"commands our scripts run per uncontended {what} cycle <= {target:g} "
            "(`INFO commandstats`)",
            f"{inside:g}",
            inside <= target,
        )
    ]


def bound_row(
    ours: dict[str, Any] | None,
    bound: dict[str, Any] | None,
    floor: dict[str, Any] | None,
    target: float,
) -> tuple[str, str, None] | None:
    """An information row for the verdicts: our scripts alone (``bound``: no library Python
    around them) beside ``floor``, and what the ``target`` ratio leaves for our Python."""
    if ours is None or bound is None or floor is None or "x_floor" not in bound:
        return None
    allowed = target * floor["p50_us"] - bound["p50_us"]
    return (
        "our scripts alone (no library Python) x floor: the least any Python on them can "
        "reach (information)",
        f"{bound['x_floor']:.2f} x; the {target:.2f} x target leaves {allowed:.0f} us per "
        f"cycle for the library's Python, which takes {ours['p50_us'] - bound['p50_us']:.0f} us",
        None,
    )


Opened = tuple[Impl, redis.Redis, LockAdapter]


def interleaved_cycles(
    params: dict[str, Any],
    open_one: Callable[[str], Opened],
    accounting: Callable[[LockAdapter, CommandStats], dict[str, float]],
    *,
    warmup: int,
    batch: int,
) -> dict[str, dict[str, float]]:
    """Uncontended acquire + release of each implementation of ``params["order"]`` (opened
    with ``open_one``, closed at the end): ``warmup`` cycles and
    the ``accounting`` counts each, then ``params["cycles"]`` timed cycles in batches of
    ``batch`` per implementation, the order rotating from batch to batch, so background load
    and CPU frequency changes hit every implementation alike."""
    opened: list[Opened] = []
    stats_client = redis.Redis(host=params["host"], port=params["port"])
    try:
        for name in params["order"]:
            opened.append(open_one(name))
        accounts: dict[str, dict[str, float]] = {}
        for impl, _client, adapter in opened:
            for _ in range(warmup):
                adapter.acquire(True)
                adapter.release()
            accounts[impl.name] = accounting(adapter, CommandStats(stats_client))
        samples: dict[str, list[float]] = {impl.name: [] for impl, _, _ in opened}
        clock = time.perf_counter_ns
        for index in range(max(1, params["cycles"] // batch)):
            shift = index % len(opened)
            for impl, _client, adapter in opened[shift:] + opened[:shift]:
                times = samples[impl.name]
                for _ in range(batch):
                    started = clock()
                    adapter.acquire(True)
                    adapter.release()
                    times.append((clock() - started) / 1000)
        return {name: {**summarize(times), **accounts[name]} for name, times in samples.items()}
    finally:
        for _impl, client, adapter in opened:
            adapter.close()
            client.close()
        stats_client.close()


def fill_locks(
    backend: Backend, names: Sequence[str], ttl_ms: int, metadata: Mapping[str, Any]
) -> None:
    """Take every (free) lock of ``names``, holder ``metadata`` included, in pipelines of
    ``FILL_BATCH`` acquire scripts (as the test suite's scale test does)."""
    holder = holder_metadata(threading.current_thread(), metadata_json(metadata))
    for start in range(0, len(names), FILL_BATCH):
        replies = backend.run_many(
            [
                lock_protocol.acquire_call(backend.keys.lock(name), new_token(), ttl_ms, holder)
                for name in names[start : start + FILL_BATCH]
            ]
        )
        if not all(int(reply[0]) == 1 for reply in replies):
            raise RuntimeError("a fresh lock could not be taken while filling")

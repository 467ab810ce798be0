"""Item 1: the uncontended cycle. One client, acquire + release, over and over.

Every implementation runs in the same worker process with a client of its own, after a
warm-up; timed cycles are interleaved in batches of 50, so every implementation sees the
same background. Per repetition we keep the median and p99 of the per-cycle time and each
implementation's ratio to ``floor`` measured in that repetition; the report shows the
median over repetitions.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from benchmarks import counting, plots
from benchmarks.context import Context
from benchmarks.measurements import Measurement, Verdict
from benchmarks.measurements._common import (
    bound_row,
    fmt,
    interleaved_cycles,
    label,
    lean_rows,
    open_adapter,
    table,
)
from benchmarks.pool import Link
from benchmarks.registry import CYCLE, LockAdapter, select
from benchmarks.server import CommandStats
from benchmarks.stats import median, ratio, spread

__all__ = ["MEASUREMENT", "cycle_task"]

WARMUP_CYCLES = 200
#: Timed cycles per implementation before switching to the next one.
BATCH = 50
#: Cycles run (after the warm-up, before timing) to count commands and server time.
ACCOUNTING_CYCLES = 200
#: Issue 22's targets: our median cycle over the floor's, and over redis-py's Lock's; the
#: commands our scripts run per cycle; Redis's time for a cycle over the floor's; the
#: library's own Python per cycle (our cycle less our scripts alone).
FLOOR_TARGET = 1.15
REDIS_PY_TARGET = 1.05
COMMANDS_TARGET = 8
REDIS_TIME_TARGET = 3.0
PYTHON_TARGET_US = 20.0
#: Our lock's scripts alone, sent with no library Python around them (see benchmarks.ours).
BOUND = "ours-scripts"


def _accounting(adapter: LockAdapter, stats: CommandStats) -> dict[str, float]:
    """Commands per cycle (sent, and executed by the server) and server time per cycle."""
    with counting.counted() as sent:
        stats.start()
        for _ in range(ACCOUNTING_CYCLES):
            adapter.acquire(True)
            adapter.release()
        executed = stats.delta()
    return {
        "sent_per_cycle": counting.total(sent) / ACCOUNTING_CYCLES,
        "server_commands_per_cycle": sum(executed.values()) / ACCOUNTING_CYCLES,
        # Time of the commands the client sent (a script's includes what it ran inside).
        "server_us_per_cycle": sum(stats.usec[name] for name in sent) / ACCOUNTING_CYCLES,
    }


def cycle_task(params: dict[str, Any], link: Link) -> dict[str, dict[str, float]]:
    """Worker: time acquire+release cycles of every implementation, interleaved in batches
    of ``BATCH`` with the order rotating (see ``interleaved_cycles``)."""
    link.ready()
    return interleaved_cycles(
        params,
        lambda name: open_adapter({**params, "impl": name}),
        _accounting,
        warmup=WARMUP_CYCLES,
        batch=BATCH,
    )


def run(ctx: Context) -> dict[str, Any]:
    settings = ctx.settings
    impls = [impl.name for impl in select(CYCLE, settings.impls)]
    impls += [impl.name for impl in select(CYCLE, settings.impls, ("bound",)) if impl.name == BOUND]
    reps: list[dict[str, dict[str, float]]] = []
    for rep in range(settings.reps):
        order = impls[rep % len(impls) :] + impls[: rep % len(impls)]
        ctx.log(f"uncontended: repetition {rep + 1}/{settings.reps} ({', '.join(order)})")
        ctx.flush()
        params = {**ctx.base_params("", ctx.lock_name("cycle")), "order": order}
        params["cycles"] = settings.cycles
        (result,) = ctx.pool.run("benchmarks.measurements.uncontended:cycle_task", [params])
        reps.append(result)
    summary: dict[str, dict[str, Any]] = {}
    for name in impls:
        rows = [rep[name] for rep in reps]
        entry: dict[str, Any] = {
            "p50_us": median(r["p50"] for r in rows),
            "p99_us": median(r["p99"] for r in rows),
            "p50_spread": spread(r["p50"] for r in rows),
            "sent_per_cycle": median(r["sent_per_cycle"] for r in rows),
            "server_commands_per_cycle": median(r["server_commands_per_cycle"] for r in rows),
            "server_us_per_cycle": median(r["server_us_per_cycle"] for r in rows),
            "reps": rows,
        }
        for base in ("floor", "ping2", "redis-py"):
            if base in impls:
                entry[f"x_{base}"] = median(
                    ratio(rep[name]["p50"], rep[base]["p50"]) for rep in reps
                )
                entry[f"x_{base}_spread"] = spread(
                    ratio(rep[name]["p50"], rep[base]["p50"]) for rep in reps
                )
        summary[name] = entry
    return {"cycles": settings.cycles, "reps": settings.reps, "impls": summary}


def targets(result: dict[str, Any]) -> list[Verdict]:
    """The item's targets, as measured."""
    ours = result["impls"].get("ours")
    rows: list[Verdict] = []
    if ours is None:
        return rows
    if "x_floor" in ours:
        rows.append(
            (
                f"ours <= {FLOOR_TARGET:.2f} x floor (median cycle)",
                f"{ours['x_floor']:.2f} x (rep-to-rep spread +/-{ours['x_floor_spread']:.0%})",
                ours["x_floor"] <= FLOOR_TARGET,
            )
        )
    if "x_redis-py" in ours:
        rows.append(
            (
                f"ours <= {REDIS_PY_TARGET:.2f} x redis-py Lock (median cycle)",
                f"{ours['x_redis-py']:.2f} x "
                f"(rep-to-rep spread +/-{ours['x_redis-py_spread']:.0%})",
                ours["x_redis-py"] <= REDIS_PY_TARGET,
            )
        )
    rows.extend(lean_rows("lock", ours, result["impls"], COMMANDS_TARGET))
    floor = result["impls"].get("floor")
    if floor is not None and floor.get("server_us_per_cycle"):
        times = ours["server_us_per_cycle"] / floor["server_us_per_cycle"]
        rows.append(
            (
                f"Redis's time per lock cycle <= {REDIS_TIME_TARGET:g} x the floor's "
                "(`INFO commandstats`)",
                f"{times:.1f} x ({ours['server_us_per_cycle']:.1f} us against "
                f"{floor['server_us_per_cycle']:.1f} us)",
                times <= REDIS_TIME_TARGET,
            )
        )
    bound = result["impls"].get(BOUND)
    if bound is not None:
        python_us = ours["p50_us"] - bound["p50_us"]
        rows.append(
            (
                f"the library's Python per lock cycle <= {PYTHON_TARGET_US:g} us (our cycle "
                "less our scripts alone, medians)",
                f"{python_us:.0f} us",
                python_us <= PYTHON_TARGET_US,
            )
        )
    row = bound_row(ours, bound, floor, FLOOR_TARGET)
    if row is not None:
        rows.append(row)
    return rows


def render(result: dict[str, Any], out_dir: Path) -> str:
    impls = result["impls"]
    header = [
        "implementation",
        "median us",
        "p99 us",
        "x floor",
        "x ping2",
        "spread",
        "sent cmds",
        "server cmds",
        "server us",
    ]
    rows = []
    for name, entry in impls.items():
        rows.append(
            [
                label(name),
                fmt(entry["p50_us"], 1),
                fmt(entry["p99_us"], 1),
                fmt(entry.get("x_floor", float("nan")), 2),
                fmt(entry.get("x_ping2", float("nan")), 2),
                f"+/-{entry['p50_spread']:.0%}",
                fmt(entry.get("sent_per_cycle", math.nan), 0),
                fmt(entry.get("server_commands_per_cycle", math.nan), 0),
                fmt(entry.get("server_us_per_cycle", math.nan), 1),
            ]
        )
    fig, ax = plots.new_figure()
    names = [n for n in impls if not math.isnan(impls[n].get("x_floor", math.nan))]
    ratios = [impls[n]["x_floor"] for n in names]
    xs = range(len(names))
    bars = ax.bar(xs, ratios, color=[plots.color_for(n) for n in names])
    for bar, name in zip(bars, names, strict=True):
        ax.annotate(
            f"{impls[name]['p50_us']:.0f} us",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.axhline(FLOOR_TARGET, color="grey", linestyle="--", linewidth=1, label="target for ours")
    ax.set_xticks(list(xs), names, rotation=20)
    ax.set_ylabel("median cycle / floor's (same repetition)")
    ax.set_title("Uncontended acquire + release, relative to floor (median of repetitions)")
    ax.legend()
    png = plots.save(fig, out_dir, "uncontended.png")
    lines = [
        f"{result['reps']} repetitions x {result['cycles']:,} cycles per implementation, "
        "each with a client of its own after a warm-up, timed in interleaved batches of "
        f"{BATCH} cycles (the order rotates from batch to batch). "
        "Ratios are taken within each repetition, then the median over repetitions; "
        '"spread" is the half-range of the repetitions\' medians relative to their median. '
        "Per cycle, counted over separate untimed cycles: commands sent (round trips), "
        "commands the server executed (inside scripts included) and the server's time for "
        "them (`INFO commandstats`); the rest of a cycle is the client and the network.",
        "",
        table(header, rows),
        "",
        f"![uncontended cycle]({png})",
    ]
    return "\n".join(lines)


MEASUREMENT = Measurement(
    name="uncontended",
    title="1. Uncontended cycle",
    item="issue 6, item 1; targets of issue 15",
    run=run,
    render=render,
    targets=targets,
)

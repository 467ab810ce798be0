"""Item 1: the uncontended cycle. One client, acquire + release, over and over.

Every implementation runs in the same worker process, one after the other, each with a
fresh client and a warm-up; the order rotates between repetitions. Per repetition we keep
the median and p99 of the per-cycle time and each implementation's ratio to ``floor``
measured in that repetition; the report shows the median over repetitions.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks import plots
from benchmarks.context import Context
from benchmarks.measurements import Measurement, Verdict
from benchmarks.measurements._common import fmt, open_adapter, table
from benchmarks.pool import Link
from benchmarks.registry import CYCLE, get, select
from benchmarks.stats import median, ratio, spread, summarize

__all__ = ["MEASUREMENT", "cycle_task"]

WARMUP_CYCLES = 200
#: "No slower than redis-py within noise": the median ratio may exceed 1 by this much.
NOISE_ALLOWANCE = 0.05
FLOOR_TARGET = 1.10


def cycle_task(params: dict[str, Any], link: Link) -> dict[str, dict[str, float]]:
    """Worker: time ``cycles`` acquire+release cycles of each implementation in turn."""
    link.ready()
    out: dict[str, dict[str, float]] = {}
    for name in params["order"]:
        impl, client, adapter = open_adapter({**params, "impl": name})
        try:
            for _ in range(WARMUP_CYCLES):
                adapter.acquire(True)
                adapter.release()
            samples: list[float] = []
            clock = time.perf_counter_ns
            for _ in range(params["cycles"]):
                started = clock()
                adapter.acquire(True)
                adapter.release()
                samples.append((clock() - started) / 1000)
            out[impl.name] = summarize(samples)
        finally:
            adapter.close()
            client.close()
    return out


def run(ctx: Context) -> dict[str, Any]:
    settings = ctx.settings
    impls = [impl.name for impl in select(CYCLE, settings.impls)]
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
                f"{ours['x_floor']:.2f} x",
                ours["x_floor"] <= FLOOR_TARGET,
            )
        )
    if "x_redis-py" in ours:
        rows.append(
            (
                f"ours no slower than redis-py Lock (within noise: <= {1 + NOISE_ALLOWANCE:.2f} x)",
                f"{ours['x_redis-py']:.2f} x "
                f"(rep-to-rep spread +/-{ours['x_redis-py_spread']:.0%})",
                ours["x_redis-py"] <= 1 + NOISE_ALLOWANCE,
            )
        )
    return rows


def render(result: dict[str, Any], out_dir: Path) -> str:
    impls = result["impls"]
    header = ["implementation", "median us", "p99 us", "x floor", "x ping2", "spread"]
    rows = []
    for name, entry in impls.items():
        rows.append(
            [
                f"{get(name).label} (`{name}`)",
                fmt(entry["p50_us"], 1),
                fmt(entry["p99_us"], 1),
                fmt(entry.get("x_floor", float("nan")), 2),
                fmt(entry.get("x_ping2", float("nan")), 2),
                f"+/-{entry['p50_spread']:.0%}",
            ]
        )
    fig, ax = plots.new_figure()
    names = list(impls)
    p50 = [impls[n]["p50_us"] for n in names]
    p99 = [impls[n]["p99_us"] for n in names]
    xs = range(len(names))
    ax.bar(xs, p50, color=[plots.color_for(n) for n in names], label="median")
    ax.scatter(xs, p99, color="black", marker="_", s=400, label="p99", zorder=3)
    ax.set_xticks(list(xs), names, rotation=20)
    ax.set_ylabel("microseconds per acquire + release")
    ax.set_title("Uncontended cycle (one client), median of repetitions")
    ax.legend()
    png = plots.save(fig, out_dir, "uncontended.png")
    lines = [
        f"{result['reps']} repetitions x {result['cycles']:,} cycles per implementation, "
        "each with a fresh client after a warm-up; the order rotates between repetitions. "
        "Ratios are taken within each repetition, then the median over repetitions; "
        '"spread" is the half-range of the repetitions\' medians relative to their median.',
        "",
        table(header, rows),
        "",
        f"![uncontended cycle]({png})",
    ]
    return "\n".join(lines)


MEASUREMENT = Measurement(
    name="uncontended",
    title="1. Uncontended cycle",
    item="issue 6, item 1",
    run=run,
    render=render,
    targets=targets,
)

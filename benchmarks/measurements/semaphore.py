"""Item 5: the semaphore. An uncontended acquire + release beside the lock floor, and 10
processes sharing a semaphore of 3 slots: admissions per second and fairness.

Uncontended: like item 1, one worker process opens every semaphore implementation (limit 3)
and the two floors (``floor``: the cheapest lock cycle; ``ping2``: two round trips), each with
a client of its own, warms them up, counts commands over separate cycles, then times cycles
in interleaved batches; ratios are taken within a repetition.

Contended: ``PROCESSES`` processes loop blocking acquire -> hold ``HOLD_MS`` (a sleep, as
I/O-bound work would) -> release on one semaphore of ``LIMIT`` slots for the window. Each
process counts its admissions and stamps every hold (``time.monotonic_ns()`` as its acquire
returned and just before its release, one clock for all processes on Linux), so the parent
can tell how busy the slots were kept and the most holders seen at once (a lower bound of
the true overlap: the stamps lie inside each hold).
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis

from benchmarks import counting, plots
from benchmarks.context import Context
from benchmarks.measurements import Measurement, Verdict
from benchmarks.measurements._common import (
    bound_row,
    describe,
    fmt,
    interleaved_cycles,
    label,
    lean_rows,
    table,
)
from benchmarks.pool import Link
from benchmarks.registry import BLOCK, CYCLE, Impl, LockAdapter, get, select
from benchmarks.server import CommandStats
from benchmarks.stats import median, percentile, ratio, spread

__all__ = ["MEASUREMENT", "block_task", "cycle_task"]

LIMIT = 3
PROCESSES = 10
#: How long each admitted process keeps its slot (slept, not spun: 2 CPUs, 3 slots).
HOLD_MS = 1.0
WARMUP_CYCLES = 200
BATCH = 50
ACCOUNTING_CYCLES = 200
WARMUP_ADMISSIONS = 5
FLOOR_TARGET = 1.20
FAIRNESS_TARGET = 2.0
#: Issue 22's: the commands our semaphore's scripts run per uncontended cycle.
COMMANDS_TARGET = 12
#: The reference loops shown beside the semaphores in the uncontended table.
FLOORS = ("floor", "ping2")
#: Our semaphore's scripts alone, sent with no library Python around them (see benchmarks.ours).
BOUND = "ours-sem-scripts"


def _open(params: dict[str, Any], name: str) -> tuple[Impl, redis.Redis, LockAdapter]:
    """In a worker: implementation ``name`` (semaphore, or a floor) on a fresh client."""
    impl = get(name)
    client = redis.Redis(host=params["host"], port=params["port"], socket_timeout=30)
    if impl.semaphore_factory is not None:
        adapter = impl.make_semaphore(client, params["name"], params["ttl"], params["limit"])
    else:
        adapter = impl.make(client, params["name"], params["ttl"])
    return impl, client, adapter


def _accounting(adapter: LockAdapter, stats: CommandStats) -> dict[str, float]:
    with counting.counted() as sent:
        stats.start()
        with counting.round_trips() as trips:
            for _ in range(ACCOUNTING_CYCLES):
                adapter.acquire(True)
                adapter.release()
        executed = stats.delta()
    return {
        "round_trips_per_cycle": trips.count / ACCOUNTING_CYCLES,
        "sent_per_cycle": counting.total(sent) / ACCOUNTING_CYCLES,
        "server_commands_per_cycle": sum(executed.values()) / ACCOUNTING_CYCLES,
        "server_us_per_cycle": sum(stats.usec[name] for name in sent) / ACCOUNTING_CYCLES,
    }


def cycle_task(params: dict[str, Any], link: Link) -> dict[str, dict[str, float]]:
    """Worker: uncontended acquire + release of every implementation, interleaved batches."""
    link.ready()
    return interleaved_cycles(
        params, lambda name: _open(params, name), _accounting, warmup=WARMUP_CYCLES, batch=BATCH
    )


def block_task(params: dict[str, Any], link: Link) -> dict[str, Any]:
    """Worker: blocking acquire, hold (sleep), release, until the window ends."""
    counting.install()
    _impl, client, adapter = _open(params, params["impl"])
    hold_s = params["hold_ms"] / 1000
    try:
        for _ in range(WARMUP_ADMISSIONS):
            if adapter.acquire(True, 5.0):
                time.sleep(hold_s)
                adapter.release()
        start = link.ready()
        deadline = start + int(params["window"] * 1e9)
        clock = time.monotonic_ns
        timeouts = 0
        waits_ms: list[float] = []
        holds: list[tuple[int, int]] = []  # (admitted, releasing), ns after the start
        before = counting.snapshot()
        while True:
            asked = clock()
            remaining = deadline - asked
            if remaining <= 0:
                break
            if not adapter.acquire(True, remaining / 1e9):
                timeouts += 1
                continue
            got = clock()
            time.sleep(hold_s)
            releasing = clock()
            adapter.release()
            if got <= deadline:
                waits_ms.append((got - asked) / 1e6)
                holds.append((got - start, releasing - start))
        sent = counting.snapshot()
        sent.subtract(before)
        return {
            "admissions": len(holds),
            "timeouts": timeouts,
            "wait_p50_ms": percentile(waits_ms, 50),
            "wait_p99_ms": percentile(waits_ms, 99),
            "holds": holds,
            "sent": {name: n for name, n in sent.items() if n > 0},
        }
    finally:
        adapter.close()
        client.close()


def most_at_once(holds: list[tuple[int, int]]) -> int:
    """The largest number of the intervals that overlap at one instant."""
    events = sorted([(start, 1) for start, _ in holds] + [(end, -1) for _, end in holds])
    most = current = 0
    for _, step in events:  # at equal times an end (-1) sorts before a start (+1)
        current += step
        most = max(most, current)
    return most


def _uncontended(ctx: Context) -> dict[str, Any]:
    settings = ctx.settings
    sems = [impl.name for impl in select(CYCLE, settings.impls, kinds=("semaphore",))]
    floors = [impl.name for impl in select(CYCLE, settings.impls, kinds=("floor", "bound"))]
    impls = sems + [name for name in (BOUND, *FLOORS) if name in floors] if sems else []
    reps: list[dict[str, dict[str, float]]] = []
    for rep in range(settings.reps if impls else 0):
        order = impls[rep % len(impls) :] + impls[: rep % len(impls)]
        ctx.log(f"semaphore, uncontended: repetition {rep + 1}/{settings.reps}")
        ctx.flush()
        params = {
            **ctx.base_params("", ctx.lock_name("semcycle")),
            "order": order,
            "cycles": settings.cycles,
            "limit": LIMIT,
        }
        (result,) = ctx.pool.run("benchmarks.measurements.semaphore:cycle_task", [params])
        reps.append(result)
    summary: dict[str, dict[str, Any]] = {}
    for name in impls:
        rows = [rep[name] for rep in reps]
        entry: dict[str, Any] = {
            "p50_us": median(r["p50"] for r in rows),
            "p99_us": median(r["p99"] for r in rows),
            "p50_spread": spread(r["p50"] for r in rows),
            "round_trips_per_cycle": median(r["round_trips_per_cycle"] for r in rows),
            "sent_per_cycle": median(r["sent_per_cycle"] for r in rows),
            "server_commands_per_cycle": median(r["server_commands_per_cycle"] for r in rows),
            "server_us_per_cycle": median(r["server_us_per_cycle"] for r in rows),
            "reps": rows,
        }
        for base in (*FLOORS, "zset-sem"):
            if base in impls:
                per_rep = [ratio(rep[name]["p50"], rep[base]["p50"]) for rep in reps]
                entry[f"x_{base}"] = median(per_rep)
                entry[f"x_{base}_spread"] = spread(per_rep)
        summary[name] = entry
    return {"cycles": settings.cycles, "reps": settings.reps, "impls": summary}


def _contended(ctx: Context) -> dict[str, Any]:
    settings = ctx.settings
    impls = [impl.name for impl in select(BLOCK, settings.impls, kinds=("semaphore",))]
    window = settings.window
    raw: dict[str, list[dict[str, Any]]] = {name: [] for name in impls}
    for rep in range(settings.contention_reps if impls else 0):
        order = impls[rep % len(impls) :] + impls[: rep % len(impls)]
        for name in order:
            ctx.log(
                f"semaphore, contended: repetition {rep + 1}/{settings.contention_reps}, {name}"
            )
            ctx.flush()
            sem_name = ctx.lock_name("semblock")
            params = [
                {
                    **ctx.base_params(name, sem_name),
                    "window": window,
                    "limit": LIMIT,
                    "hold_ms": HOLD_MS,
                }
                for _ in range(PROCESSES)
            ]
            results = ctx.pool.run(
                "benchmarks.measurements.semaphore:block_task",
                params,
                before_start=ctx.stats.start,
            )
            executed = ctx.stats.delta()
            sent: Counter[str] = Counter()
            for r in results:
                sent.update(r["sent"])
            per_process = [r["admissions"] for r in results]
            total = sum(per_process)
            holds = [tuple(h) for r in results for h in r["holds"]]
            window_ns = window * 1e9
            busy_ns = sum(min(end, window_ns) - start for start, end in holds)
            raw[name].append(
                {
                    "admissions_per_s": total / window,
                    "per_process": per_process,
                    "starvation": ratio(max(per_process), min(per_process))
                    if min(per_process)
                    else math.inf,
                    "most_at_once": most_at_once(holds),
                    "utilisation": busy_ns / (LIMIT * window_ns),
                    "idle_ms_per_admission": ratio(LIMIT * window_ns - busy_ns, total) / 1e6,
                    "wait_p50_ms": median(r["wait_p50_ms"] for r in results),
                    "wait_p99_ms": max(r["wait_p99_ms"] for r in results),
                    "timeouts": sum(r["timeouts"] for r in results),
                    "server_commands_per_admission": ratio(sum(executed.values()), total),
                    "sent_per_admission": ratio(sum(sent.values()), total),
                    "sent": dict(sent.most_common()),
                }
            )
    summary: dict[str, dict[str, Any]] = {}
    for name in impls:
        rows = raw[name]
        summary[name] = {
            "admissions_per_s": median(r["admissions_per_s"] for r in rows),
            "spread": spread(r["admissions_per_s"] for r in rows),
            "starvation": median(r["starvation"] for r in rows),
            "starvation_worst": max(r["starvation"] for r in rows),
            "min_share": median(min(r["per_process"]) / window for r in rows),
            "max_share": median(max(r["per_process"]) / window for r in rows),
            "most_at_once": max(r["most_at_once"] for r in rows),
            "utilisation": median(r["utilisation"] for r in rows),
            "idle_ms_per_admission": median(r["idle_ms_per_admission"] for r in rows),
            "wait_p50_ms": median(r["wait_p50_ms"] for r in rows),
            "wait_p99_ms": median(r["wait_p99_ms"] for r in rows),
            "server_commands_per_admission": median(
                r["server_commands_per_admission"] for r in rows
            ),
            "sent_per_admission": median(r["sent_per_admission"] for r in rows),
            "timeouts": sum(r["timeouts"] for r in rows),
        }
    versus: dict[str, Any] = {}
    peers = [name for name in impls if get(name).is_peer]
    if "ours-sem" in impls and peers:
        per_rep = []
        for i in range(settings.contention_reps):
            best = max(peers, key=lambda p: raw[p][i]["admissions_per_s"])
            per_rep.append(
                (
                    ratio(raw["ours-sem"][i]["admissions_per_s"], raw[best][i]["admissions_per_s"]),
                    best,
                )
            )
        versus = {"ratio": median(r for r, _ in per_rep), "best_peers": [b for _, b in per_rep]}
    for rows in raw.values():
        for r in rows:
            r.pop("holds", None)
    return {
        "window_s": window,
        "reps": settings.contention_reps,
        "processes": PROCESSES,
        "limit": LIMIT,
        "hold_ms": HOLD_MS,
        "cpus": os.cpu_count(),
        "impls": summary,
        "ours_vs_best_peer": versus,
        "raw": raw,
    }


def run(ctx: Context) -> dict[str, Any]:
    if not select(CYCLE, ctx.settings.impls, kinds=("semaphore",)):
        ctx.log("semaphore: no semaphore implementation selected (--impls)")
    return {"uncontended": _uncontended(ctx), "contended": _contended(ctx)}


def targets(result: dict[str, Any]) -> list[Verdict]:
    rows: list[Verdict] = []
    ours = result["uncontended"]["impls"].get("ours-sem")
    if ours is not None and "x_floor" in ours:
        rows.append(
            (
                f"ours-sem <= {FLOOR_TARGET:.2f} x floor (uncontended acquire + release, "
                "median cycle)",
                f"{ours['x_floor']:.2f} x (rep-to-rep spread +/-{ours['x_floor_spread']:.0%})",
                ours["x_floor"] <= FLOOR_TARGET,
            )
        )
        uncontended = result["uncontended"]["impls"]
        if "server_commands_per_cycle" in ours:
            rows.extend(lean_rows("semaphore", ours, uncontended, COMMANDS_TARGET))
        bound = bound_row(ours, uncontended.get(BOUND), uncontended.get("floor"), FLOOR_TARGET)
        if bound is not None:
            rows.append(bound)
    contended = result["contended"]
    mine = contended["impls"].get("ours-sem")
    if mine is not None:
        setup = f"{contended['processes']} processes, limit {contended['limit']}"
        rows.append(
            (
                f"ours-sem: max/min admissions per process <= {FAIRNESS_TARGET:g} ({setup}; "
                "issue 6's fairness target of item 3; issue 15 sets none for semaphores)",
                f"{mine['starvation']:.2f} (worst repetition {mine['starvation_worst']:.2f})",
                mine["starvation"] <= FAIRNESS_TARGET,
            )
        )
        rows.append(
            (
                f"ours-sem: never more than {contended['limit']} holders at once",
                f"at most {mine['most_at_once']} seen",
                mine["most_at_once"] <= contended["limit"],
            )
        )
        vs = contended.get("ours_vs_best_peer") or {}
        if vs:
            best = Counter(vs["best_peers"]).most_common(1)[0][0]
            rows.append(
                (
                    f"ours-sem admissions/s beside the best peer ({setup}; no target set)",
                    f"{vs['ratio']:.2f} x (best peer: {best})",
                    None,
                )
            )
    return rows


def _render_uncontended(result: dict[str, Any]) -> list[str]:
    header = [
        "implementation",
        "median us",
        "p99 us",
        "x floor",
        "x ping2",
        "x zset-sem",
        "spread",
        "round trips",
        "sent cmds",
        "server cmds",
        "server us",
    ]
    rows = []
    for name, entry in result["impls"].items():
        rows.append(
            [
                label(name),
                fmt(entry["p50_us"], 1),
                fmt(entry["p99_us"], 1),
                fmt(entry.get("x_floor", math.nan), 2),
                fmt(entry.get("x_ping2", math.nan), 2),
                fmt(entry.get("x_zset-sem", math.nan), 2),
                f"+/-{entry['p50_spread']:.0%}",
                fmt(entry["round_trips_per_cycle"], 1),
                fmt(entry["sent_per_cycle"], 1),
                fmt(entry["server_commands_per_cycle"], 0),
                fmt(entry["server_us_per_cycle"], 1),
            ]
        )
    return [
        f"**Uncontended.** {result['reps']} repetitions x {result['cycles']:,} cycles per "
        f"implementation (limit {LIMIT}), one process, a client each, interleaved batches of "
        f"{BATCH}; ratios within each repetition, then the median. `floor` and `ping2` are "
        "item 1's lock floor and two PINGs, measured in the same batches. Per cycle, over "
        "separate untimed cycles: round trips, commands sent (a MULTI/EXEC pipeline is one "
        "round trip of several commands), commands the server executed (inside scripts "
        "included) and its time for them.",
        "",
        table(header, rows),
    ]


def _render_contended(result: dict[str, Any]) -> list[str]:
    header = [
        "implementation",
        "admissions/s",
        "per process min / max (per s)",
        "max/min",
        "slots busy",
        "idle slot ms / admission",
        "most at once",
        "wait p50 / p99 ms",
        "server cmds / admission",
        "sent cmds / admission",
    ]
    rows = []
    for name, entry in result["impls"].items():
        rows.append(
            [
                label(name),
                f"{fmt(entry['admissions_per_s'])} (+/-{entry['spread']:.0%})",
                f"{fmt(entry['min_share'])} / {fmt(entry['max_share'])}",
                fmt(entry["starvation"], 2),
                f"{entry['utilisation']:.0%}",
                fmt(entry["idle_ms_per_admission"], 2),
                str(entry["most_at_once"]),
                f"{fmt(entry['wait_p50_ms'], 2)} / {fmt(entry['wait_p99_ms'], 1)}",
                fmt(entry["server_commands_per_admission"], 1),
                fmt(entry["sent_per_admission"], 1),
            ]
        )
    ideal = result["limit"] / (result["hold_ms"] / 1000)
    return [
        f"**Contended.** {result['processes']} processes on {result['cpus']} CPUs share a "
        f"semaphore of {result['limit']} slots; each loops blocking acquire -> "
        f"{result['hold_ms']:g} ms hold (a sleep) -> release for {result['window_s']:g} s; "
        f"{result['reps']} repetitions, median shown. With free hand-overs the slots would "
        f'admit {ideal:,.0f}/s; "slots busy" is the time holders held them over '
        f'{result["limit"]} x the window, and "idle slot ms / admission" the time slots '
        "stood free (or granted but not yet in use) per admission: what passing a slot on "
        'costs. "most at once" is the most holders whose '
        "stamped holds overlapped (worst repetition; the limit is exceeded if it is larger). "
        "\"max/min\" is the busiest process's admissions over the least busy one's.",
        "",
        table(header, rows),
    ]


def _render_guarantees(names: list[str]) -> list[str]:
    rows = []
    for name in names:
        shown, waits_by = describe(name)
        try:
            impl = get(name)
        except KeyError:
            rows.append([shown, waits_by, "", ""])
            continue
        rows.append([shown, waits_by, impl.note, impl.guarantees])
    return [
        "What each semaphore does and does not guarantee:",
        "",
        table(["implementation", "a blocked acquire", "cost", "guarantees"], rows, "llll"),
    ]


def render(result: dict[str, Any], out_dir: Path) -> str:
    uncontended = result["uncontended"]
    contended = result["contended"]
    fig, (left, right) = plots.new_figure(11.0, 4.5, ncols=2)
    names = [n for n in uncontended["impls"] if "x_floor" in uncontended["impls"][n]]
    xs = range(len(names))
    bars = left.bar(
        xs,
        [uncontended["impls"][n]["x_floor"] for n in names],
        color=[plots.color_for(n) for n in names],
    )
    for bar, name in zip(bars, names, strict=True):
        left.annotate(
            f"{uncontended['impls'][name]['p50_us']:.0f} us",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    left.axhline(FLOOR_TARGET, color="grey", linestyle="--", linewidth=1, label="target for ours")
    left.set_xticks(list(xs), names, rotation=30, ha="right")
    left.set_ylabel("median cycle / floor's (same repetition)")
    left.set_title("Uncontended acquire + release")
    left.legend(fontsize=8)
    names = list(contended["impls"])
    xs = range(len(names))
    entries = [contended["impls"][n] for n in names]
    right.bar(
        xs, [e["admissions_per_s"] for e in entries], color=[plots.color_for(n) for n in names]
    )
    right.vlines(
        list(xs),
        [e["min_share"] * contended["processes"] for e in entries],
        [e["max_share"] * contended["processes"] for e in entries],
        color="black",
        linewidth=2,
        label="slowest..busiest process x N",
    )
    right.set_xticks(list(xs), names, rotation=20)
    right.set_ylabel("admissions per second")
    right.set_title(
        f"{contended['processes']} processes, limit {contended['limit']}, "
        f"{contended['hold_ms']:g} ms holds"
    )
    right.legend(fontsize=8)
    png = plots.save(fig, out_dir, "semaphore.png")
    lines = [
        *_render_uncontended(uncontended),
        "",
        *_render_contended(contended),
        "",
        *_render_guarantees(list(contended["impls"]) or list(uncontended["impls"])),
        "",
        f"![semaphore]({png})",
    ]
    return "\n".join(lines)


MEASUREMENT = Measurement(
    name="semaphore",
    title="5. Semaphore",
    item="issue 6, item 5; targets of issue 15",
    run=run,
    render=render,
    targets=targets,
    workers=lambda settings: PROCESSES,
)

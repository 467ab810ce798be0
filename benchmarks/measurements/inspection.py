"""Item 6: inspection. A page of live locks among 10,000, with and without 1,000,000 unrelated
keys in the database: time, round trips, and the commands the server ran.

The parent fills the server: ``LOCKS`` live locks (acquired in pipelines of acquire scripts,
as the test suite's scale test does, with a TTL that outlasts the measurement) and, for the
"with other keys" dataset, ``OTHER_KEYS`` plain string keys (``MSET`` in pipelines), which it
deletes again for the dataset without them. The datasets alternate from repetition to
repetition (without, with | with, without | ...), so each repetition measures both
back to back and only one fill or delete lies between them.

A worker process reads, in rounds that rotate the order:

- ``list_locks(client=backend, count=100)``: the first page of 100 (ours);
- ``list_locks(count=1000)``: a page of 1,000, for scale;
- the naive way, as people list locks today: ``SCAN MATCH <ns>:*lock* COUNT 1000`` until 100
  keys matched, with an ``HGETALL`` per match (pipelined per SCAN reply: the charitable form;
  one round trip per match would add 100);

and once per dataset, everything: ours page by page (1,000 per page) and the naive SCAN over
the whole keyspace. Round trips are counted at redis-py's connections (one per command or
pipeline written), server commands with ``INFO commandstats`` over separate untimed reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from matplotlib.patches import Patch

from benchmarks import counting, plots
from benchmarks.context import Context
from benchmarks.measurements import Measurement, Verdict
from benchmarks.measurements._common import FILL_BATCH, fill_locks, fmt, table
from benchmarks.pool import Link
from benchmarks.server import CommandStats
from benchmarks.stats import median, percentile, ratio, spread
from django_redis_locks.core import Backend
from django_redis_locks.inspect import list_locks

__all__ = ["MEASUREMENT", "sample_task"]

NAMESPACE = "drl"
LOCKS = 10_000
OTHER_KEYS = 1_000_000
#: Commands per pipeline when filling in the other keys (FILL_BATCH keys per command).
FILL_PIPELINE = 100
#: Longer than any run: the locks must stay live until the last read.
LOCK_TTL_MS = 3_600_000
SCAN_COUNT = 1000
TIME_TARGET_MS = 50.0
ROUND_TRIP_TARGET = 5
#: Each variant's reads per dataset and repetition (fewer with --quick: cycles // 100).
MAX_ROUNDS = 20
PAGE = "ours, first page of 100"
BIG_PAGE = "ours, first page of 1,000"
NAIVE_PAGE = "naive, first 100 (SCAN + HGETALL)"
ALL = "ours, all 10,000 (pages of 1,000)"
NAIVE_ALL = "naive, all (SCAN + HGETALL)"
DATASETS = ("locks only", "locks + 1,000,000 other keys")


def naive_listing(client: redis.Redis, count: int | None) -> list[tuple[Any, Any]]:
    """``SCAN MATCH <ns>:*lock*`` + ``HGETALL`` of each match, until ``count`` (None: all)."""
    found: list[tuple[Any, Any]] = []
    cursor = 0
    while True:
        cursor, keys = client.scan(cursor, match=f"{NAMESPACE}:*lock*", count=SCAN_COUNT)
        if keys:
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(key)
            found.extend(zip(keys, pipe.execute(), strict=True))
        if cursor == 0 or (count is not None and len(found) >= count):
            return found if count is None else found[:count]


def _all_pages(backend: Backend) -> int:
    cursor = None
    total = 0
    while True:
        page = list_locks(client=backend, count=1000, cursor=cursor)
        total += len(page.items)
        cursor = page.cursor
        if cursor is None:
            return total


def sample_task(params: dict[str, Any], link: Link) -> dict[str, Any]:
    """Worker: time the listings on the dataset the server holds now."""
    client = redis.Redis(host=params["host"], port=params["port"], socket_timeout=60)
    stats_client = redis.Redis(host=params["host"], port=params["port"], socket_timeout=60)
    backend = Backend(client, namespace=NAMESPACE)
    reads: dict[str, Callable[[], int]] = {
        PAGE: lambda: len(list_locks(client=backend, count=100).items),
        BIG_PAGE: lambda: len(list_locks(client=backend, count=1000).items),
        NAIVE_PAGE: lambda: len(naive_listing(client, 100)),
    }
    everything: dict[str, Callable[[], int]] = {
        ALL: lambda: _all_pages(backend),
        NAIVE_ALL: lambda: len(naive_listing(client, None)),
    }
    try:
        for read in reads.values():  # connections made, scripts loaded
            read()
        link.ready()
        stats = CommandStats(stats_client)
        found: dict[str, dict[str, Any]] = {}
        for name, read in {**reads, **everything}.items():
            stats.start()
            with counting.round_trips() as trips:
                items = read()
            executed = stats.delta()
            found[name] = {
                "items": items,
                "round_trips": trips.count,
                "server_commands": sum(executed.values()),
                "executed": dict(executed.most_common(6)),
                "times_ms": [],
            }
        clock = time.perf_counter_ns
        names = list(reads)
        for round_ in range(params["rounds"]):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                started = clock()
                reads[name]()
                found[name]["times_ms"].append((clock() - started) / 1e6)
        for name, read in everything.items():
            started = clock()
            read()
            found[name]["times_ms"].append((clock() - started) / 1e6)
        return {"dbsize": int(client.dbsize()), "reads": found}
    finally:
        backend.close()
        client.close()
        stats_client.close()


def _other_keys(client: redis.Redis, fill: bool) -> None:
    """``MSET`` (fill) or ``UNLINK`` (delete) the unrelated keys, in pipelines."""
    pipe = client.pipeline(transaction=False)
    for batch in range(OTHER_KEYS // FILL_BATCH):
        keys = [f"cache:{i}" for i in range(batch * FILL_BATCH, (batch + 1) * FILL_BATCH)]
        if fill:
            pipe.mset(dict.fromkeys(keys, "v"))
        else:
            pipe.unlink(*keys)
        if batch % FILL_PIPELINE == FILL_PIPELINE - 1:
            pipe.execute()
    pipe.execute()


def run(ctx: Context) -> dict[str, Any]:
    settings = ctx.settings
    rounds = max(3, min(MAX_ROUNDS, settings.cycles // 100))
    ctx.flush()
    ctx.log(f"inspection: {LOCKS:,} locks")
    with ctx.server.client() as client:
        client.connection_pool.connection_kwargs["socket_timeout"] = 120
        names = [f"job:{i:05d}" for i in range(LOCKS)]
        fill_locks(Backend(client, namespace=NAMESPACE), names, LOCK_TTL_MS, {"label": "bench"})
        others = False
        raw: dict[str, list[dict[str, Any]]] = {dataset: [] for dataset in DATASETS}
        for rep in range(settings.reps):
            for step in range(2):
                if step == 1:
                    others = not others
                    ctx.log(f"inspection: {'adding' if others else 'deleting'} the other keys")
                    _other_keys(client, fill=others)
                dataset = DATASETS[int(others)]
                ctx.log(f"inspection: repetition {rep + 1}/{settings.reps}, {dataset}")
                params = {"host": ctx.server.host, "port": ctx.server.port, "rounds": rounds}
                (result,) = ctx.pool.run("benchmarks.measurements.inspection:sample_task", [params])
                raw[dataset].append(result)
    ctx.flush()
    summary: dict[str, dict[str, Any]] = {}
    for dataset, reps in raw.items():
        entries: dict[str, Any] = {}
        for name in reps[0]["reads"]:
            rows = [rep["reads"][name] for rep in reps]
            entries[name] = {
                "p50_ms": median(median(r["times_ms"]) for r in rows),
                "p90_ms": median(percentile(r["times_ms"], 90) for r in rows),
                "spread": spread(median(r["times_ms"]) for r in rows),
                "round_trips": max(r["round_trips"] for r in rows),
                "server_commands": median(r["server_commands"] for r in rows),
                "items": min(r["items"] for r in rows),
                "executed": rows[-1]["executed"],
            }
        summary[dataset] = {"dbsize": reps[-1]["dbsize"], "reads": entries}
    # Each repetition read both datasets back to back: with / without, per repetition.
    others_effect = {}
    for name in raw[DATASETS[0]][0]["reads"]:
        per_rep = [
            ratio(median(w["reads"][name]["times_ms"]), median(wo["reads"][name]["times_ms"]))
            for w, wo in zip(raw[DATASETS[1]], raw[DATASETS[0]], strict=True)
        ]
        others_effect[name] = {"ratio": median(per_rep), "spread": spread(per_rep)}
    return {
        "locks": LOCKS,
        "other_keys": OTHER_KEYS,
        "reps": settings.reps,
        "rounds": rounds,
        "datasets": summary,
        "with_over_without": others_effect,
        "raw": raw,
    }


def targets(result: dict[str, Any]) -> list[Verdict]:
    datasets = result["datasets"]
    crowded = datasets.get(DATASETS[1], {}).get("reads", {})
    empty = datasets.get(DATASETS[0], {}).get("reads", {})
    page = crowded.get(PAGE)
    if page is None:
        return []
    setup = f"{result['locks']:,} locks, {result['other_keys']:,} other keys"
    rows: list[Verdict] = [
        (
            f"first page of 100 < {TIME_TARGET_MS:g} ms ({setup})",
            f"{page['p50_ms']:.1f} ms median (p90 {page['p90_ms']:.1f} ms); naive SCAN: "
            f"{crowded[NAIVE_PAGE]['p50_ms']:.1f} ms",
            page["p50_ms"] < TIME_TARGET_MS,
        ),
        (
            f"first page of 100 in <= {ROUND_TRIP_TARGET} round trips",
            f"{page['round_trips']} (naive SCAN: {crowded[NAIVE_PAGE]['round_trips']})",
            page["round_trips"] <= ROUND_TRIP_TARGET,
        ),
    ]
    if PAGE in empty:
        same = all(
            empty[name]["round_trips"] == crowded[name]["round_trips"]
            and empty[name]["server_commands"] == crowded[name]["server_commands"]
            for name in (PAGE, BIG_PAGE, ALL)
        )
        effect = result["with_over_without"][PAGE]
        rows.append(
            (
                "the other keys do not matter: the same round trips and server commands "
                "with and without them",
                f"{'the same' if same else 'not the same'}; time with / without "
                f"{effect['ratio']:.2f} x (naive SCAN, all: "
                f"{result['with_over_without'][NAIVE_ALL]['ratio']:.0f} x)",
                same,
            )
        )
    return rows


def render(result: dict[str, Any], out_dir: Path) -> str:
    header = [
        "read",
        "median ms",
        "p90 ms",
        "spread",
        "round trips",
        "server cmds",
        "locks read",
        "x without other keys",
    ]
    sections = []
    for dataset, entry in result["datasets"].items():
        rows = []
        for name, read in entry["reads"].items():
            effect = result["with_over_without"][name]
            rows.append(
                [
                    name,
                    fmt(read["p50_ms"], 2),
                    fmt(read["p90_ms"], 2),
                    f"+/-{read['spread']:.0%}",
                    fmt(read["round_trips"]),
                    fmt(read["server_commands"]),
                    fmt(read["items"]),
                    fmt(effect["ratio"], 2) if dataset == DATASETS[1] else "",
                ]
            )
        sections += [
            f"**{dataset}** ({entry['dbsize']:,} keys in the database):",
            "",
            table(header, rows),
            "",
        ]
    fig, (left, right) = plots.new_figure(11.0, 4.5, ncols=2)
    names = list(result["datasets"][DATASETS[0]]["reads"])
    width = 0.4
    for offset, dataset in ((-width / 2, DATASETS[0]), (width / 2, DATASETS[1])):
        reads = result["datasets"][dataset]["reads"]
        xs = [i + offset for i in range(len(names))]
        hatch = "" if dataset == DATASETS[0] else "//"
        colors = [plots.color_for("naive" if "naive" in n else "ours") for n in names]
        left.bar(xs, [reads[n]["p50_ms"] for n in names], width, color=colors, hatch=hatch)
        right.bar(
            xs,
            [reads[n]["round_trips"] for n in names],
            width,
            color=colors,
            hatch=hatch,
        )
    short = [n.replace(" (SCAN + HGETALL)", "").replace(" (pages of 1,000)", "") for n in names]
    handles = [
        Patch(facecolor=plots.color_for("ours"), label="ours"),
        Patch(facecolor=plots.color_for("naive"), label="naive SCAN + HGETALL"),
        Patch(facecolor="white", edgecolor="black", label=DATASETS[0]),
        Patch(facecolor="white", edgecolor="black", hatch="//", label=DATASETS[1]),
    ]
    for ax in (left, right):
        ax.set_xticks(range(len(names)), short, rotation=20, fontsize=8)
        ax.set_yscale("log")
        ax.legend(handles=handles, fontsize=7)
    left.axhline(TIME_TARGET_MS, color="grey", linestyle="--", linewidth=1)
    left.set_ylabel("median ms (log scale)")
    left.set_title("Listing time")
    right.axhline(ROUND_TRIP_TARGET, color="grey", linestyle="--", linewidth=1)
    right.set_ylabel("round trips (log scale)")
    right.set_title("Round trips")
    png = plots.save(fig, out_dir, "inspection.png")
    lines = [
        f"{result['locks']:,} live locks, alone and among {result['other_keys']:,} unrelated "
        "string keys; the datasets alternate from repetition to repetition. "
        f"{result['reps']} repetitions; in each, every page read {result['rounds']} times "
        "(rotating order) and everything read once: medians of the repetitions' medians "
        '(p90 likewise). "x without other keys" is the time with them over the time '
        "without, taken within each repetition. Round trips are writes to Redis counted at "
        "redis-py's connections (a pipeline is one); server commands are from "
        "`INFO commandstats` (inside scripts included). The naive reads use `SCAN MATCH "
        f"{NAMESPACE}:*lock* COUNT {SCAN_COUNT}` and pipeline an `HGETALL` per match.",
        "",
        *sections,
        f"![inspection]({png})",
    ]
    return "\n".join(lines)


MEASUREMENT = Measurement(
    name="inspection",
    title="6. Inspection",
    item="issue 6, item 6",
    run=run,
    render=render,
    targets=targets,
)

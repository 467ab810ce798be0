"""Item 7: what ``@redis_lock`` adds to a Django view. The same view, undecorated and
decorated, through Django's test client, beside two Redis round trips in the same process.

One worker process sets up the minimal project of :mod:`benchmarks.django_site` (no
database, no middleware, a django-redis alias ``locks`` on the run's server), then times, in
interleaved batches whose order rotates:

- ``plain``: ``GET /plain/42/``, the view undecorated;
- ``decorated``: ``GET /locked/42/``, the same view under ``@redis_lock("order:{order_id}",
  timeout=30)`` (its defaults: non-blocking, auto-renewed, 409 on contention);
- ``ping2-view``: the plain view plus two ``PING``s on the alias's django-redis client: two
  round trips as a request pays them (a view's round trips cost more than a tight loop's:
  the request handling between them leaves the CPU caches and the socket path cold);
- ``lock-view``: the plain view plus a bare ``Lock`` acquire + release on the alias (one
  object, reused): the lock's own part of the added time;
- ``ping2``: two ``PING``s in a tight loop on the same client, as items 1-5 measure them.

The added time per request is the decorated request's median less the plain one's, taken
within each repetition, and compared with the two yardsticks of the same repetition:
``ping2-view`` less ``plain`` (the verdict's), and ``ping2``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import counting, plots
from benchmarks.context import Context
from benchmarks.measurements import Measurement, Verdict
from benchmarks.measurements._common import fmt, table
from benchmarks.pool import Link
from benchmarks.stats import median, ratio, spread, summarize

__all__ = ["MEASUREMENT", "request_task"]

SETTINGS_MODULE = "benchmarks.django_site.settings"
WARMUP = 200
BATCH = 50
ACCOUNTING = 200
#: Issue 15's target: the added time over what two PINGs add to the same view.
ADDED_TARGET = 1.35
#: Variant -> (what it is, URL requested through the test client, or None: a tight loop).
VARIANTS = {
    "plain": ("the view, undecorated", "/plain/42/"),
    "decorated": ("the view under @redis_lock", "/locked/42/"),
    "ping2-view": ("the view + two PINGs", "/ping2/42/"),
    "lock-view": ("the view + a bare Lock acquire + release", "/lock/42/"),
    "ping2": ("two PINGs in a loop (no request)", None),
}


def _setup_django(redis_url: str) -> None:
    os.environ["DRL_BENCH_REDIS_URL"] = redis_url
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS_MODULE
    import django
    from django.apps import apps
    from django.conf import settings

    if not apps.ready:  # workers are reused: set up once per process
        django.setup()
    if settings.CACHES["locks"]["LOCATION"] != redis_url:
        raise RuntimeError(f"this worker's Django already uses {settings.CACHES['locks']}")


def _variants() -> dict[str, Callable[[], None]]:
    from django.test import Client
    from django_redis import get_redis_connection

    http = Client()
    redis_client = get_redis_connection("locks")

    def request(url: str) -> Callable[[], None]:
        def call() -> None:
            status = http.get(url).status_code
            if status != 200:
                raise RuntimeError(f"GET {url} answered {status}")

        return call

    def ping2() -> None:
        redis_client.ping()
        redis_client.ping()

    return {name: request(url) if url is not None else ping2 for name, (_, url) in VARIANTS.items()}


def request_task(params: dict[str, Any], link: Link) -> dict[str, dict[str, float]]:
    """Worker: time the variants in interleaved batches."""
    _setup_django(params["redis_url"])
    variants = _variants()
    link.ready()
    accounts: dict[str, float] = {}
    for name, call in variants.items():
        for _ in range(WARMUP):
            call()
        with counting.round_trips() as trips:
            for _ in range(ACCOUNTING):
                call()
        accounts[name] = trips.count / ACCOUNTING
    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    clock = time.perf_counter_ns
    for batch in range(max(1, params["requests"] // BATCH)):
        shift = batch % len(names)
        for name in names[shift:] + names[:shift]:
            call = variants[name]
            times = samples[name]
            for _ in range(BATCH):
                started = clock()
                call()
                times.append((clock() - started) / 1000)
    return {
        name: {**summarize(times), "round_trips": accounts[name]} for name, times in samples.items()
    }


def run(ctx: Context) -> dict[str, Any]:
    settings = ctx.settings
    url = f"redis://{ctx.server.host}:{ctx.server.port}/0"
    reps: list[dict[str, dict[str, float]]] = []
    for rep in range(settings.reps):
        ctx.log(f"decorator: repetition {rep + 1}/{settings.reps}")
        ctx.flush()
        params = {"redis_url": url, "requests": settings.cycles}
        (result,) = ctx.pool.run("benchmarks.measurements.decorator:request_task", [params])
        reps.append(result)
    summary: dict[str, dict[str, Any]] = {}
    for name in VARIANTS:
        rows = [rep[name] for rep in reps]
        summary[name] = {
            "p50_us": median(r["p50"] for r in rows),
            "p99_us": median(r["p99"] for r in rows),
            "spread": spread(r["p50"] for r in rows),
            "per_s": median(1e6 / r["mean"] for r in rows),
            "round_trips": median(r["round_trips"] for r in rows),
            "added_us": median(rep[name]["p50"] - rep["plain"]["p50"] for rep in reps),
        }

    added = [_added(rep, "decorated") for rep in reps]
    in_view = [ratio(a, _added(rep, "ping2-view")) for a, rep in zip(added, reps, strict=True)]
    in_loop = [ratio(a, rep["ping2"]["p50"]) for a, rep in zip(added, reps, strict=True)]
    return {
        "reps": settings.reps,
        "requests": settings.cycles,
        "variants": summary,
        "added_us": median(added),
        "added_spread": spread(added),
        "x_ping2_view": median(in_view),
        "x_ping2_view_spread": spread(in_view),
        "x_ping2": median(in_loop),
        "lock_us": median(_added(rep, "lock-view") for rep in reps),
        "own_us": median(rep["decorated"]["p50"] - rep["lock-view"]["p50"] for rep in reps),
        "raw": reps,
    }


def _added(rep: dict[str, dict[str, float]], name: str) -> float:
    """What variant ``name`` adds to the plain request in repetition ``rep`` (medians, us)."""
    return rep[name]["p50"] - rep["plain"]["p50"]


def targets(result: dict[str, Any]) -> list[Verdict]:
    variants = result["variants"]
    return [
        (
            f"@redis_lock adds <= {ADDED_TARGET:.2f} x what two PINGs add to the same view "
            "(per request)",
            f"+{result['added_us']:.0f} us = {result['x_ping2_view']:.2f} x two PINGs in the "
            f"view (+{variants['ping2-view']['added_us']:.0f} us), {result['x_ping2']:.2f} x "
            f"ping2 in a loop ({variants['ping2']['p50_us']:.0f} us); the lock cycle alone "
            f"+{result['lock_us']:.0f} us",
            result["x_ping2_view"] <= ADDED_TARGET,
        )
    ]


def render(result: dict[str, Any], out_dir: Path) -> str:
    variants = result["variants"]
    header = [
        "variant",
        "calls / s",
        "median us",
        "p99 us",
        "added to plain, us",
        "spread",
        "round trips",
    ]
    rows = [
        [
            f"{VARIANTS[name][0] if name in VARIANTS else name} (`{name}`)",
            fmt(entry["per_s"]),
            fmt(entry["p50_us"], 1),
            fmt(entry["p99_us"], 1),
            fmt(entry["added_us"], 1) if VARIANTS.get(name, ("", None))[1] else "",
            f"+/-{entry['spread']:.0%}",
            fmt(entry["round_trips"], 1),
        ]
        for name, entry in variants.items()
    ]
    plain = variants["plain"]["p50_us"]
    lock = max(result["lock_us"], 0.0)
    own = max(result["own_us"], 0.0)
    fig, ax = plots.new_figure(9.0, 3.6)
    bars = [
        ("decorated", [("the view", plain), ("Lock cycle", lock), ("decorator's own", own)]),
        ("view + Lock", [("the view", plain), ("Lock cycle", lock)]),
        ("view + 2 PINGs", [("the view", plain), ("2 PINGs", variants["ping2-view"]["added_us"])]),
        ("plain view", [("the view", plain)]),
        ("2 PINGs, loop", [("2 PINGs, loop", variants["ping2"]["p50_us"])]),
    ]
    colors = {
        "the view": plots.color_for("plain"),
        "Lock cycle": plots.color_for("lock"),
        "decorator's own": plots.color_for("decorated"),
        "2 PINGs": plots.color_for("ping2"),
        "2 PINGs, loop": plots.color_for("ping2"),
    }
    shown: set[str] = set()
    for row, parts in bars:
        left = 0.0
        for part, width in parts:
            ax.barh(
                [row],
                [width],
                left=[left],
                color=colors[part],
                label=None if part in shown or part == "2 PINGs, loop" else part,
            )
            shown.add(part)
            left += width
    ax.set_xlabel("median microseconds per request (per cycle for the loop)")
    ax.set_title("@redis_lock on a Django view (test client), medians of repetitions")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    png = plots.save(fig, out_dir, "decorator.png")
    lines = [
        f"{result['reps']} repetitions x {result['requests']:,} calls per variant in one "
        f"process, interleaved in batches of {BATCH} (rotating order), after {WARMUP} "
        "warm-up calls each; requests go through Django's test client (the full request "
        "handler and URL resolution, no middleware) to the minimal project of "
        "`benchmarks/django_site`. Rates are 1 / the mean time; the added times are "
        "medians less the plain request's median within each repetition, then the median "
        "over repetitions. Round trips per call are counted at redis-py's connections over "
        "separate calls.",
        "",
        table(header, rows),
        "",
        f"Added by the decorator: **{result['added_us']:.0f} us per request** "
        f"(+/-{result['added_spread']:.0%} over repetitions), "
        f"{result['x_ping2_view']:.2f} x what two PINGs add to the same view and "
        f"{result['x_ping2']:.2f} x two PINGs in a loop. Of it, the lock cycle "
        f"+{result['lock_us']:.0f} us and the decorator's own work (the name from the "
        f"arguments, a `Lock` per call, its metadata, the renewer) +{result['own_us']:.0f} us.",
        "",
        f"![decorator overhead]({png})",
    ]
    return "\n".join(lines)


MEASUREMENT = Measurement(
    name="decorator",
    title="7. Decorator overhead",
    item="issue 6, item 7; targets of issue 15",
    run=run,
    render=render,
    targets=targets,
)

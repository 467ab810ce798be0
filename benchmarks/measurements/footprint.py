"""Footprint: the memory that locks and semaphores take in Redis, held and after release.

Measured with ``INFO memory`` (``used_memory``) on the run's own server, one kind at a time
on an emptied database (``FLUSHALL``), by one worker process:

- ``NAMES`` unique names ``order:<i>``, each acquired once (non-blocking) with realistic holder
  metadata (a view's label, a user, a path) and then released: the memory per live hold
  (after every acquire) and per released name (after every release), both over the memory
  before the first acquire; the keys left per name; and the longest remaining life (``PTTL``)
  of every key that stays. Ours as applications use it (one ``Lock`` or ``Semaphore`` object
  per name, one client), and beside it the cheapest peers through their benchmark adapters.
- ``LIVE_LOCKS`` live locks, taken in pipelines of acquire scripts (as item 6 fills its
  10,000), with the same metadata: megabytes and bytes per lock, once per run.
- ``BUSY_NAMES`` lock names each acquired and released ``BUSY_CYCLES`` times (a name in
  steady use: its recent releases and average hold filled): what each keeps, once per run.

Memory is ``used_memory`` less the clients' buffers (``mem_clients_normal`` and
``mem_clients_slaves``), so that connections opening or closing elsewhere (idle wake-up
listeners of earlier measurements end on their own) do not count; every client of the
measurement is connected and every script loaded before the baseline is read, so the figures
are the keys' own memory with their share of Redis's key tables.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from benchmarks import plots
from benchmarks.context import Context
from benchmarks.measurements import Measurement, Verdict
from benchmarks.measurements._common import fill_locks, fmt, label, table
from benchmarks.pool import Link
from benchmarks.registry import get
from benchmarks.stats import median
from django_redis_locks.core import Backend, Lock, Semaphore

__all__ = ["MEASUREMENT", "footprint_task"]

NAMES = 3_000
LIVE_LOCKS = 100_000
#: What a web application's ``@redis_lock("order:{order_id}")`` records of its holder.
METADATA = {"label": "orders.views.charge", "user": 48213, "path": "/orders/48213/charge/"}
#: The holds' timeout: longer than the life allowed to what a release leaves, so a name
#: that were kept for its timeout would show.
TIMEOUT_S = 600.0
SEMAPHORE_LIMIT = 3
NAMESPACE = "drl-fp"
#: Ours, then the peers measured beside them (each only if the run selects it).
OURS = ("ours", "ours-sem")
PEERS = ("floor", "redis-py", "python-redis-lock")
#: Repetitions of the per-name figures (at most; fewer when the run has fewer).
MAX_REPS = 3
BUSY_NAMES = 1_000
BUSY_CYCLES = 20
#: Issue 15's target for what a released name leaves, and how long it lives (issue 22 let
#: that go up to 10 minutes); issue 22's for a live lock, many live locks, and a name in
#: steady use.
RELEASED_TARGET_BYTES = 300
LIFE_TARGET_S = 600.0
LIVE_TARGET_BYTES = 450
LIVE_LOCKS_TARGET_MB = 50.0
BUSY_TARGET_BYTES = 300
#: How long to wait for the server to free objects in the background (lazy free).
SETTLE_S = 10.0

Holder = tuple[Callable[[], bool], Callable[[], object]]  # (acquire, release)


def _memory(admin: redis.Redis) -> int:
    """The server's memory less its clients' buffers, once nothing is being freed in the
    background."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        memory = admin.info("memory")
        pending = int(memory.get("lazyfree_pending_objects", 0))
        if pending == 0:
            clients = int(memory.get("mem_clients_normal", 0))
            clients += int(memory.get("mem_clients_slaves", 0))
            return int(memory["used_memory"]) - clients
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server did not settle: {pending} objects being freed")
        time.sleep(0.01)


def _empty(admin: redis.Redis) -> None:
    admin.flushall()  # freed in the background where lazy freeing is on: _memory() waits


def _holders(kind: str, backend: Backend, names: list[str]) -> list[Holder]:
    """One holder per name: ours as an application makes them, a peer by its adapter."""
    if kind == "ours":
        locks = [Lock(n, client=backend, timeout=TIMEOUT_S, metadata=METADATA) for n in names]
        return [(functools.partial(lock.acquire, blocking=False), lock.release) for lock in locks]
    if kind == "ours-sem":
        semaphores = [
            Semaphore(n, SEMAPHORE_LIMIT, client=backend, timeout=TIMEOUT_S, metadata=METADATA)
            for n in names
        ]
        return [(functools.partial(sem.acquire, blocking=False), sem.release) for sem in semaphores]
    impl = get(kind)
    adapters = [impl.make(backend.client, name, TIMEOUT_S) for name in names]
    return [(functools.partial(adapter.acquire, False), adapter.release) for adapter in adapters]


def _lives(admin: redis.Redis) -> list[int]:
    """``PTTL`` of every key in the database (ms; -1: no expiry)."""
    lives: list[int] = []
    cursor = 0
    while True:
        cursor, keys = admin.scan(cursor, count=1000)
        if keys:
            pipe = admin.pipeline(transaction=False)
            for key in keys:
                pipe.pttl(key)
            lives.extend(int(life) for life in pipe.execute())
        if cursor == 0:
            return lives


def _per_name(admin: redis.Redis, params: dict[str, Any], kind: str) -> dict[str, float]:
    """Acquire ``NAMES`` names of ``kind``, release them; memory, keys and lives per name."""
    _empty(admin)
    client = redis.Redis(host=params["host"], port=params["port"], socket_timeout=60)
    backend = Backend(client, namespace=NAMESPACE)
    (warm_acquire, warm_release), *holders = _holders(
        kind, backend, ["warm-up"] + [f"order:{i}" for i in range(NAMES)]
    )
    try:
        if not warm_acquire():  # the client connected, the scripts loaded
            raise RuntimeError(f"{kind}: a free name could not be taken")
        warm_release()
        keys_before = int(admin.dbsize())
        before = _memory(admin)
        for acquire, _release in holders:
            if not acquire():
                raise RuntimeError(f"{kind}: a free name could not be taken")
        held = _memory(admin)
        keys_held = int(admin.dbsize())
        for _acquire, release in holders:
            release()
        after = _memory(admin)
        keys_after = int(admin.dbsize())
        lives = _lives(admin)
    finally:
        backend.close()
        client.close()
    expiring = [life for life in lives if life >= 0]
    return {
        "bytes_per_live_hold": (held - before) / NAMES,
        "keys_per_live_hold": (keys_held - keys_before) / NAMES,
        "bytes_per_released_name": (after - before) / NAMES,
        "keys_per_released_name": (keys_after - keys_before) / NAMES,
        "keys_left": len(lives),
        "keys_without_expiry": len(lives) - len(expiring),
        "longest_life_s": max(expiring, default=0) / 1000,
    }


def _live_locks(admin: redis.Redis, params: dict[str, Any]) -> dict[str, float]:
    """``LIVE_LOCKS`` live locks, taken in pipelines of acquire scripts."""
    _empty(admin)
    client = redis.Redis(host=params["host"], port=params["port"], socket_timeout=120)
    backend = Backend(client, namespace=NAMESPACE)
    ttl_ms = round(TIMEOUT_S * 1000)
    try:
        fill_locks(backend, ["warm-up"], ttl_ms, METADATA)  # connected, scripts loaded
        before = _memory(admin)
        fill_locks(backend, [f"order:{i}" for i in range(LIVE_LOCKS)], ttl_ms, METADATA)
        used = _memory(admin) - before
    finally:
        backend.close()
        client.close()
    return {"locks": LIVE_LOCKS, "mb": used / 1e6, "bytes_per_lock": used / LIVE_LOCKS}


def _busy_names(admin: redis.Redis, params: dict[str, Any]) -> dict[str, float]:
    """``BUSY_NAMES`` lock names, each acquired and released ``BUSY_CYCLES`` times: the
    memory each keeps, over the memory before."""
    _empty(admin)
    client = redis.Redis(host=params["host"], port=params["port"], socket_timeout=60)
    backend = Backend(client, namespace=NAMESPACE)
    (warm_acquire, warm_release), *holders = _holders(
        "ours", backend, ["warm-up"] + [f"order:{i}" for i in range(BUSY_NAMES)]
    )
    try:
        if not warm_acquire():
            raise RuntimeError("ours: a free name could not be taken")
        warm_release()
        before = _memory(admin)
        for _ in range(BUSY_CYCLES):
            for acquire, release in holders:
                if not acquire():
                    raise RuntimeError("ours: a free name could not be taken")
                release()
        after = _memory(admin)
    finally:
        backend.close()
        client.close()
    return {
        "names": BUSY_NAMES,
        "cycles": BUSY_CYCLES,
        "bytes_per_name": (after - before) / BUSY_NAMES,
    }


def footprint_task(params: dict[str, Any], link: Link) -> dict[str, Any]:
    """Worker: the per-name figures of each kind, and (if asked) the many live locks."""
    link.ready()
    admin = redis.Redis(host=params["host"], port=params["port"], socket_timeout=120)
    try:
        found: dict[str, Any] = {kind: _per_name(admin, params, kind) for kind in params["kinds"]}
        if params["live_locks"]:
            found["live_locks"] = _live_locks(admin, params)
            found["busy_names"] = _busy_names(admin, params)
        _empty(admin)
        return found
    finally:
        admin.close()


def run(ctx: Context) -> dict[str, Any]:
    wanted = ctx.settings.impls
    kinds = [kind for kind in (*OURS, *PEERS) if wanted is None or kind in wanted]
    reps = min(MAX_REPS, ctx.settings.reps)
    raw: list[dict[str, Any]] = []
    for rep in range(reps):
        ctx.log(f"footprint: repetition {rep + 1}/{reps} ({', '.join(kinds)})")
        ctx.flush()
        params = {
            "host": ctx.server.host,
            "port": ctx.server.port,
            "kinds": kinds,
            "live_locks": rep == 0 and "ours" in kinds,
        }
        (result,) = ctx.pool.run("benchmarks.measurements.footprint:footprint_task", [params])
        raw.append(result)
    summary: dict[str, dict[str, float]] = {}
    for kind in kinds:
        rows = [rep[kind] for rep in raw]
        entry = {key: median(row[key] for row in rows) for key in rows[0]}
        released = [row["bytes_per_released_name"] for row in rows]
        entry["released_half_range"] = (max(released) - min(released)) / 2
        entry["longest_life_s"] = max(row["longest_life_s"] for row in rows)
        entry["keys_without_expiry"] = max(row["keys_without_expiry"] for row in rows)
        summary[kind] = entry
    return {
        "names": NAMES,
        "metadata": METADATA,
        "timeout_s": TIMEOUT_S,
        "semaphore_limit": SEMAPHORE_LIMIT,
        "reps": reps,
        "kinds": summary,
        "live_locks": raw[0].get("live_locks") if raw else None,
        "busy_names": raw[0].get("busy_names") if raw else None,
        "raw": raw,
    }


def _what_stays(entry: dict[str, float]) -> str:
    if entry["keys_left"] == 0:
        return "nothing stays"
    never = entry["keys_without_expiry"]
    return f"longest PTTL {entry['longest_life_s']:.0f} s" + (
        f", {never:.0f} keys never expire" if never else ""
    )


def targets(result: dict[str, Any]) -> list[Verdict]:
    kinds = result["kinds"]
    setup = f"{result['names']:,} names `order:<i>` with holder metadata"
    rows: list[Verdict] = []
    for kind, what in (("ours", "Lock"), ("ours-sem", "Semaphore")):
        entry = kinds.get(kind)
        if entry is None:
            continue
        rows.append(
            (
                f"{what}: a released name leaves <= {RELEASED_TARGET_BYTES} bytes ({setup}; "
                "`INFO memory`)",
                f"{entry['bytes_per_released_name']:.0f} bytes "
                f"({entry['keys_per_released_name']:.2f} keys per name)",
                entry["bytes_per_released_name"] <= RELEASED_TARGET_BYTES,
            )
        )
        rows.append(
            (
                f"{what}: what a release leaves lives <= {LIFE_TARGET_S / 60:g} minutes",
                _what_stays(entry),
                entry["keys_without_expiry"] == 0 and entry["longest_life_s"] <= LIFE_TARGET_S,
            )
        )
    ours = kinds.get("ours")
    if ours is not None:
        rows.append(
            (
                f"Lock: bytes per live lock <= {LIVE_TARGET_BYTES} ({setup}; `INFO memory`)",
                f"{fmt(ours['bytes_per_live_hold'])} bytes",
                ours["bytes_per_live_hold"] <= LIVE_TARGET_BYTES,
            )
        )
    held = [
        f"{what} {fmt(kinds[kind]['bytes_per_live_hold'])}"
        for kind, what in (("ours-sem", "Semaphore"), ("floor", "floor's key"))
        if kind in kinds
    ]
    if held:
        rows.append(("bytes per live hold, beside it (no target)", ", ".join(held), None))
    live = result.get("live_locks")
    if live:
        rows.append(
            (
                f"memory of {live['locks']:,} live locks <= {LIVE_LOCKS_TARGET_MB:g} MB",
                f"{live['mb']:.1f} MB, {fmt(live['bytes_per_lock'])} bytes per lock",
                live["mb"] <= LIVE_LOCKS_TARGET_MB,
            )
        )
    busy = result.get("busy_names")
    if busy:
        rows.append(
            (
                f"Lock: a name released {busy['cycles']} times keeps <= {BUSY_TARGET_BYTES} "
                f"bytes ({busy['names']:,} names)",
                f"{fmt(busy['bytes_per_name'])} bytes",
                busy["bytes_per_name"] <= BUSY_TARGET_BYTES,
            )
        )
    return rows


def render(result: dict[str, Any], out_dir: Path) -> str:
    kinds = result["kinds"]
    header = [
        "implementation",
        "bytes / live hold",
        "keys / live hold",
        "bytes / released name",
        "+/- bytes",
        "keys / released name",
        "what stays",
    ]
    rows = [
        [
            label(kind),
            fmt(entry["bytes_per_live_hold"]),
            fmt(entry["keys_per_live_hold"], 2),
            fmt(entry["bytes_per_released_name"]),
            f"+/-{fmt(entry['released_half_range'])}",
            fmt(entry["keys_per_released_name"], 2),
            _what_stays(entry),
        ]
        for kind, entry in kinds.items()
    ]
    fig, ax = plots.new_figure(8.0, 3.8)
    names = list(kinds)
    ys = range(len(names))
    height = 0.4
    ax.barh(
        [y - height / 2 for y in ys],
        [kinds[n]["bytes_per_live_hold"] for n in names],
        height,
        color=[plots.color_for(n) for n in names],
        alpha=0.45,
        label="live hold",
    )
    ax.barh(
        [y + height / 2 for y in ys],
        [kinds[n]["bytes_per_released_name"] for n in names],
        height,
        color=[plots.color_for(n) for n in names],
        label="after its release",
    )
    ax.axvline(
        RELEASED_TARGET_BYTES,
        color="grey",
        linestyle="--",
        linewidth=1,
        label=f"target after release: {RELEASED_TARGET_BYTES} bytes",
    )
    ax.set_yticks(list(ys), names)
    ax.invert_yaxis()
    ax.set_xlabel(f"bytes per name (INFO memory over {result['names']:,} names)")
    ax.set_title("Memory per name: held (light) and after its release (dark)")
    ax.legend(fontsize=8)
    png = plots.save(fig, out_dir, "footprint.png")
    metadata = ", ".join(f"{key} {value!r}" for key, value in result["metadata"].items())
    live = result.get("live_locks")
    lines = [
        f"{result['names']:,} unique names `order:<i>`, each acquired once (non-blocking, "
        f"timeout {result['timeout_s']:g} s, holder metadata {metadata}) and then released, "
        "one implementation at a time on an emptied database. Memory is `used_memory` less "
        "the clients' buffers (`INFO memory`) after every acquire (live hold) and after every "
        "release, less the same before the first acquire, per name. Ours is one `Lock` (or "
        f"`Semaphore` of {result['semaphore_limit']} slots) per name on one client; the peers use "
        'their benchmark adapters (no metadata: they keep none). "what stays" is the '
        "longest `PTTL` of the keys left after the releases. Repetitions: "
        f'{result["reps"]}, medians shown, "+/- bytes" their half-range; a few tens of '
        "bytes either way (below zero too) are Redis's own tables growing and shrinking.",
        "",
        table(header, rows, "lrrrrrl"),
        "",
    ]
    if live:
        lines += [
            f"**{live['locks']:,} live locks** (the same metadata, taken in pipelines of "
            f"acquire scripts): {live['mb']:.1f} MB, {fmt(live['bytes_per_lock'])} bytes per "
            "lock (the registry's sorted sets outgrow their compact encoding at this scale).",
            "",
        ]
    lines.append(f"![footprint]({png})")
    return "\n".join(lines)


MEASUREMENT = Measurement(
    name="footprint",
    title="8. Footprint",
    item="issue 15, item 1",
    run=run,
    render=render,
    targets=targets,
)

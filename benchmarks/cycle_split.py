"""Where the time of an uncontended lock cycle goes: ``python -m benchmarks.cycle_split``.

Times the same loop as item 1 (acquire + release of one ``Lock``, non-blocking, one client)
beside ``floor`` (``SET NX PX`` + a compare-and-delete script), and splits our cycle with a
clock around each script call into the time spent inside redis-py's calls (packing, the
round trip, Redis executing the script, parsing) and the lock's own Python outside them.
``INFO commandstats`` gives the commands Redis executed per cycle and its time for them, so
the time inside the calls splits further into Redis and the rest (client and network).

Prints medians over repetitions; like every figure here, compare them with each other, not
across machines. ``--profile`` adds a profile summary of the lock's own Python: the loop runs
again under ``cProfile`` and the functions of ``django_redis_locks`` are listed by their own
time (the profiler slows everything down: read the shares, not the microseconds).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from benchmarks.server import CommandStats, start_server
from django_redis_locks.core import Backend, Lock
from django_redis_locks.core.protocol.scripting import Call
from django_redis_locks.core.runtime import driver

_COMPARE_AND_DELETE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)


def _server_time(
    stats_client: redis.Redis, loop: Callable[[], None], cycles: int
) -> tuple[float, float]:
    """Commands Redis executed per cycle (inside scripts included) and its microseconds for
    the commands the client sent (a script's time includes what it ran)."""
    stats = CommandStats(stats_client)
    stats.start()
    loop()
    executed = stats.delta()
    sent = ("set", "evalsha")
    return sum(executed.values()) / cycles, sum(stats.usec[name] for name in sent) / cycles


class _Loops:
    """The two loops measured, and a clock around each of our script calls."""

    def __init__(self, client: redis.Redis, cycles: int) -> None:
        self.client = client
        self.cycles = cycles
        self.lock = Lock("split", client=Backend(client, namespace="drl-split"), timeout=10)
        self.release = client.register_script(_COMPARE_AND_DELETE)
        self.inside = 0.0  # seconds spent in script calls since the last reset

    def ours(self) -> None:
        for _ in range(self.cycles):
            self.lock.acquire(blocking=False)
            self.lock.release()

    def floor(self) -> None:
        for _ in range(self.cycles):
            self.client.set("split-floor", "token", nx=True, px=10_000)
            self.release(keys=["split-floor"], args=["token"])

    def timed(self, run: Callable[[Any, Call], Any]) -> Callable[[Any, Call], Any]:
        def timed_run(redis_client: Any, call: Call) -> Any:
            started = time.perf_counter()
            try:
                return run(redis_client, call)
            finally:
                self.inside += time.perf_counter() - started

        return timed_run


RunScript = Callable[[Any, Call], Any]


@contextmanager
def wrapped_driver_run(wrap: Callable[[RunScript], RunScript]) -> Iterator[None]:
    """Within the block, the driver sends every script call through ``wrap(scripting.run)``."""
    namespace = vars(driver)  # the driver calls scripting.run under this name
    real_run = namespace["run"]
    namespace["run"] = wrap(real_run)
    try:
        yield
    finally:
        namespace["run"] = real_run


def _timed(loop: Callable[[], None], cycles: int) -> float:
    started = time.perf_counter()
    loop()
    return (time.perf_counter() - started) / cycles * 1e6


def _measure(loops: _Loops, reps: int) -> tuple[float, float, float]:
    """Medians of (our cycle, our time inside script calls, the floor's cycle), in us."""
    loops.ours()
    loops.floor()  # warm-up: connections, scripts loaded
    totals: list[float] = []
    calls: list[float] = []
    floors: list[float] = []
    with wrapped_driver_run(loops.timed):
        for _ in range(reps):
            loops.inside = 0.0
            totals.append(_timed(loops.ours, loops.cycles))
            calls.append(loops.inside / loops.cycles * 1e6)
            floors.append(_timed(loops.floor, loops.cycles))
    return statistics.median(totals), statistics.median(calls), statistics.median(floors)


def _profile(loops: _Loops, top: int) -> list[str]:
    """The lock's own functions by their own time in a profiled run of ``ours``."""
    profiler = cProfile.Profile()
    profiler.runcall(loops.ours)
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    ours = [
        (own, calls, f"{Path(file).name}:{line} {name}")
        for (file, line, name), (_, calls, own, _, _) in stats.items()
        if "django_redis_locks" in file
    ]
    total = sum(own for own, _, _ in ours) or 1.0
    ours.sort(reverse=True)
    lines = [f"the lock's own Python, profiled ({len(ours)} functions), by own time:"]
    for own, calls, where in ours[:top]:
        lines.append(f"  {own / total:6.1%}  {calls / loops.cycles:5.1f} calls/cycle  {where}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cycle_split", description=__doc__)
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="also list the top N functions"
    )
    args = parser.parse_args(argv)
    bench = start_server()
    try:
        loops = _Loops(bench.client(), args.cycles)
        total, in_calls, floor_us = _measure(loops, args.reps)
        stats_client = bench.client()
        our_cmds, our_server_us = _server_time(stats_client, loops.ours, args.cycles)
        floor_cmds, floor_server_us = _server_time(stats_client, loops.floor, args.cycles)
        rows = [
            ("floor: whole cycle", floor_us),
            (f"  of which Redis executing it ({floor_cmds:.0f} commands)", floor_server_us),
            ("ours: whole cycle", total),
            ("  inside redis-py's script calls", in_calls),
            (f"    of which Redis executing the scripts ({our_cmds:.0f} commands)", our_server_us),
            ("  the lock's own Python outside them", total - in_calls),
            ("ours - floor", total - floor_us),
        ]
        print(f"{bench.flavour} {bench.version}, {args.reps} x {args.cycles} cycles, medians:")
        for label, value in rows:
            print(f"{label:<70} {value:8.1f} us")
        if args.profile:
            print("\n".join(_profile(loops, args.profile)))
        stats_client.close()
        loops.client.close()
    finally:
        bench.stop()


if __name__ == "__main__":
    main()

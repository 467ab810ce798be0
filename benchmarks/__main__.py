"""``python -m benchmarks``: run the lock benchmarks and write docs/benchmarks/results.md.

Starts its own Redis server on a free loopback port, a pool of worker processes, runs the
chosen measurements in order, and writes ``results.json``, ``results.md`` and PNG plots.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchmarks import environment, registry
from benchmarks.context import Context, Settings
from benchmarks.measurements import load
from benchmarks.pool import WorkerPool
from benchmarks.report import load_results, write_results
from benchmarks.server import CommandStats, start_server

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "docs" / "benchmarks"
#: --quick: a smoke run that exercises every code path in about a minute.
QUICK = Settings(
    reps=1, contention_reps=1, cycles=300, window=0.5, handoff_rounds=20, processes=(1, 2)
)


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_args(argv: list[str]) -> argparse.Namespace:
    defaults = Settings()
    measurements = load()
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--only",
        type=_csv,
        default=list(measurements),
        help=f"measurements to run, comma-separated (default: all of {','.join(measurements)})",
    )
    parser.add_argument(
        "--impls",
        type=_csv,
        default=None,
        help="implementations, comma-separated (default: every registered one: "
        f"{','.join(impl.name for impl in registry.all_impls())})",
    )
    parser.add_argument(
        "--reps",
        type=int,
        default=defaults.reps,
        help="repetitions of items 1, 4, 5 (uncontended), 6 and 7 (default %(default)s)",
    )
    parser.add_argument(
        "--contention-reps",
        type=int,
        default=defaults.contention_reps,
        help="repetitions of items 2, 3 and 5 (contended) (default %(default)s)",
    )
    parser.add_argument(
        "--window",
        type=float,
        default=defaults.window,
        help="seconds per contention trial (items 2, 3, 5); handoff time budget per "
        "implementation and repetition (default %(default)s)",
    )
    parser.add_argument(
        "--cycles",
        type=int,
        default=defaults.cycles,
        help="uncontended cycles per implementation and repetition (items 1, 5), requests per "
        "variant (item 7); item 6 reads each page cycles/100 times, at most 20 "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--processes",
        type=lambda s: tuple(int(x) for x in _csv(s)),
        default=defaults.processes,
        help="process counts of item 2 (default 1,2,5,10)",
    )
    parser.add_argument(
        "--blocking-processes",
        type=int,
        default=defaults.blocking_processes,
        help="processes of item 3 (default %(default)s)",
    )
    parser.add_argument(
        "--critical-us",
        type=int,
        default=defaults.critical_us,
        help="busy critical section of item 3, microseconds (default %(default)s)",
    )
    parser.add_argument(
        "--handoff-rounds",
        type=int,
        default=defaults.handoff_rounds,
        help="most handoffs per implementation and repetition (default %(default)s)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a short smoke run (1 repetition, 0.5 s windows, 1-2 processes)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="where results.md, results.json and the plots go (default: docs/benchmarks)",
    )
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="re-render results.md and the plots from results.json",
    )
    args = parser.parse_args(argv)
    unknown = [name for name in args.only if name not in measurements]
    if unknown:
        parser.error(f"unknown measurement(s) {unknown}; known: {list(measurements)}")
    if args.impls is not None:
        try:
            for name in args.impls:
                registry.get(name)
        except KeyError as exc:
            parser.error(str(exc.args[0]))
    return args


def settings_from(args: argparse.Namespace) -> Settings:
    if args.quick:
        return Settings(**{**QUICK.__dict__, "impls": tuple(args.impls) if args.impls else None})
    return Settings(
        reps=args.reps,
        contention_reps=args.contention_reps,
        cycles=args.cycles,
        window=args.window,
        processes=args.processes,
        blocking_processes=args.blocking_processes,
        critical_us=args.critical_us,
        handoff_rounds=args.handoff_rounds,
        impls=tuple(args.impls) if args.impls else None,
    )


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    measurements = load()
    if args.render_only:
        stored = load_results(args.out)
        path = write_results(args.out, stored["environment"], stored["measurements"], measurements)
        print(f"re-rendered {path}")
        return 0
    settings = settings_from(args)
    chosen = {name: measurements[name] for name in args.only}
    started = time.monotonic()

    def log(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    server = start_server()
    log(f"{server.flavour} {server.version} on {server.host}:{server.port}")
    env = environment.describe(argv, server.flavour, server.version)
    pool = WorkerPool(max(m.workers(settings) for m in chosen.values()))
    results = {}
    try:
        with server.client() as client:
            ctx = Context(settings, server, pool, CommandStats(client), log)
            for name, measurement in chosen.items():
                log(f"{measurement.title}")
                results[name] = measurement.run(ctx)
    finally:
        pool.close()
        server.stop()
    env["duration_s"] = time.monotonic() - started
    env["load_average_after"] = environment.load_average()
    path = write_results(args.out, env, results, measurements)
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The demo: worker processes contend for one lock; show that they never overlap."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

MANAGE = Path(__file__).resolve().parents[3] / "manage.py"


def max_concurrency(intervals: list[tuple[float, float]]) -> int:
    """Sweep over (start, end) intervals: the most that were open at one instant."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    open_now = peak = 0
    for _, step in events:  # at equal times, -1 sorts first: touching intervals do not overlap
        open_now += step
        peak = max(peak, open_now)
    return peak


class Command(BaseCommand):
    help = "Run worker processes that contend for one Redis lock and report what they saw."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--for", dest="seconds", type=float, default=10.0)
        parser.add_argument("--workers", type=int, default=4)
        parser.add_argument("--name", default="demo:nightly-report")

    def handle(self, *args: Any, **options: Any) -> None:
        seconds, workers, name = options["seconds"], options["workers"], options["name"]
        self.stdout.write(
            f"{workers} worker processes take the lock {name!r} for {seconds:g} s "
            "(Ctrl-C stops them)"
        )
        procs = [
            subprocess.Popen(
                [sys.executable, str(MANAGE), "demo_worker", name, str(seconds)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(workers)
        ]
        holds: list[list[dict[str, float]]] = [[] for _ in procs]

        def collect(index: int) -> None:
            stdout = procs[index].stdout
            assert stdout is not None
            for line in stdout:
                holds[index].append(json.loads(line))

        readers = [threading.Thread(target=collect, args=(i,)) for i in range(workers)]
        for reader in readers:
            reader.start()
        started = time.monotonic()
        try:
            while any(proc.poll() is None for proc in procs):
                time.sleep(1.0)  # progress report cadence
                done = sum(len(h) for h in holds)
                self.stdout.write(f"  {time.monotonic() - started:5.1f} s: {done} holds so far")
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.terminate()
            for proc in procs:
                proc.wait()
            for reader in readers:
                reader.join()

        intervals = [(h["start"], h["end"]) for worker in holds for h in worker]
        fences = [h["fence"] for worker in holds for h in worker]
        peak = max_concurrency(intervals)
        violations = sum(
            1 for a, b in zip(sorted(intervals), sorted(intervals)[1:], strict=False) if b[0] < a[1]
        )
        self.stdout.write("")
        self.stdout.write("summary")
        for index, worker in enumerate(holds):
            self.stdout.write(f"  worker {index}: {len(worker)} holds")
        self.stdout.write(f"  locks taken: {len(intervals)}")
        self.stdout.write(f"  max concurrency observed: {peak} (limit 1)")
        self.stdout.write(f"  fences strictly increasing: {len(set(fences)) == len(fences)}")
        self.stdout.write(f"  violations: {violations}")
        if violations or peak > 1 or not intervals:
            raise CommandError("mutual exclusion was violated or nothing ran")

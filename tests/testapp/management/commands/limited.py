"""At most 2 copies at once. Logs ``S``/``E`` lines (monotonic ns, pid, holder id) to
``--log``, waits for ``--gate`` to exist, then sleeps ``--sleep`` seconds; writes an ``L``
line when it learns (from ``self.semaphore_lost``) that its slot was lost."""

from __future__ import annotations

import os
import time
from argparse import ArgumentParser
from pathlib import Path
from typing import Any, TextIO

from django.core.management.base import BaseCommand

from django_redis_locks import SemaphoreCommandMixin

STEP = 0.01  # seconds between two looks for the gate file


class Command(SemaphoreCommandMixin, BaseCommand):
    help = "A semaphore-limited command for the tests."
    semaphore_limit = 2
    raise_on_unwind = False

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--log", help="append S/E/L lines to this file")
        parser.add_argument("--gate", help="wait until this file exists")
        parser.add_argument("--sleep", type=float, default=0.0, help="then sleep this long")
        parser.add_argument("--ensure", action="store_true", help="end with ensure_held()")
        parser.add_argument("--output", help="return this text (printed by execute())")
        parser.add_argument(
            "--raise-on-unwind",
            action="store_true",
            help="when a signal's exception interrupts the run, raise RuntimeError over it",
        )

    def handle(self, *args: Any, **options: Any) -> str | None:
        log = open(options["log"], "a", buffering=1) if options["log"] else None  # noqa: SIM115
        self.raise_on_unwind = options["raise_on_unwind"]
        try:
            self.record(log, "S")
            lost_seen = False
            gate = Path(options["gate"]) if options["gate"] else None
            while gate is not None and not gate.exists():
                lost_seen = self.pause(log, STEP, lost_seen)
            deadline = time.monotonic() + options["sleep"]
            while (left := deadline - time.monotonic()) > 0:
                lost_seen = self.pause(log, left, lost_seen)
            if options["ensure"]:
                assert self.semaphore is not None
                self.semaphore.ensure_held()
            self.record(log, "E")
        except (KeyboardInterrupt, SystemExit):
            if self.raise_on_unwind:
                # What Python 3.13's threading.Condition.wait() can do when a signal handler
                # raises at the wrong moment (cpython#118433): a second exception on the way out.
                raise RuntimeError("release unlocked lock")  # noqa: B904
            raise
        finally:
            if log is not None:
                log.close()
        output: str | None = options["output"]
        return output

    def pause(self, log: TextIO | None, seconds: float, lost_seen: bool) -> bool:
        """Wait ``seconds`` (interruptible by signals); log ``L`` once the slot is lost."""
        if lost_seen:
            time.sleep(seconds)
            return True
        if self.semaphore_lost.wait(seconds):
            self.record(log, "L")
            return True
        return False

    def record(self, log: TextIO | None, kind: str) -> None:
        line = f"{kind} {time.monotonic_ns()} {os.getpid()} {self.semaphore_holder_id}\n"
        if log is not None:
            log.write(line)
        else:
            self.stdout.write(line, ending="")

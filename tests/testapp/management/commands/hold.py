"""Hold a lock or a semaphore slot for the CLI tests, from a process of its own.

Prints ``{"holder_id": ..., "pid": ...}`` once held, waits for ``--gate`` to exist, then
prints ``{"ensure_held": <seconds left or the exception's class name>}`` and releases.
"""

from __future__ import annotations

import json
import os
import time
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand

from django_redis_locks import Lock, LockError, Semaphore


class Command(BaseCommand):
    requires_system_checks = ()

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--semaphore", type=int, metavar="LIMIT", help="a semaphore slot")
        parser.add_argument("--label", default="hold")
        parser.add_argument("--gate", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        metadata = {"label": options["label"]}
        primitive: Lock | Semaphore
        if options["semaphore"]:
            primitive = Semaphore(
                options["name"], options["semaphore"], timeout=30, metadata=metadata
            )
        else:
            primitive = Lock(options["name"], timeout=30, metadata=metadata)
        assert primitive.acquire(blocking=False)
        self.stdout.write(json.dumps({"holder_id": primitive.holder_id, "pid": os.getpid()}))
        self.stdout.flush()
        gate = Path(options["gate"])
        while not gate.exists():
            time.sleep(0.01)
        try:
            answer: object = primitive.ensure_held()
            primitive.release()
        except LockError as exc:
            answer = type(exc).__name__
        self.stdout.write(json.dumps({"ensure_held": answer}))

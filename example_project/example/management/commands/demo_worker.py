"""One demo worker: take a lock again and again, print each hold as a JSON line."""

from __future__ import annotations

import json
import random
import time
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from django_redis_locks import Lock


class Command(BaseCommand):
    help = "Take the lock NAME repeatedly for SECONDS; print each hold interval as JSON."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("name")
        parser.add_argument("seconds", type=float)

    def handle(self, *args: Any, **options: Any) -> None:
        lock = Lock(options["name"], timeout=5, metadata={"label": "example.demo_worker"})
        deadline = time.monotonic() + options["seconds"]
        while time.monotonic() < deadline:
            if not lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                break
            start = time.monotonic()
            fence = lock.fence
            time.sleep(random.uniform(0.01, 0.05))  # the work done under the lock
            end = time.monotonic()
            lock.release()
            self.stdout.write(json.dumps({"start": start, "end": end, "fence": fence}))
            self.stdout.flush()

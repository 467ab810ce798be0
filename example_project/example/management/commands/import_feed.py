"""A management command of which at most two copies run at once, across every host.

``SemaphoreCommandMixin`` takes a slot of the fair semaphore ``command:import_feed`` before
``handle()`` runs and gives it back afterwards (also on errors, SIGTERM and Ctrl-C). A third
copy waits for a slot, in arrival order.
"""

from __future__ import annotations

import random
import time
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from django_redis_locks import SemaphoreCommandMixin
from example.holds import record_hold


class Command(SemaphoreCommandMixin, BaseCommand):
    help = "Import a feed; at most two copies run at once, the others wait for a slot."
    semaphore_limit = 2
    semaphore_policy = "wait"
    semaphore_timeout = 10  # heartbeats renew it; only a SIGKILLed run keeps it this long

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("feed", nargs="?", default="prices")

    def handle(self, *args: Any, **options: Any) -> None:
        assert self.semaphore is not None  # set by the mixin while the command runs
        with record_hold("semaphore", "command:import_feed", limit=2, by="command"):
            for _ in range(random.randint(3, 6)):
                self.semaphore.ensure_held()  # raises LockLost if the slot was lost meanwhile
                time.sleep(0.2)  # one batch of the import
        self.stdout.write(f"imported {options['feed']}")

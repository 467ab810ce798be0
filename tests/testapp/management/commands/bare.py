"""One copy at a time, and nothing cooperates: ``add_arguments()`` and ``handle()`` call no
``super()``, and ``handle()`` never looks at the semaphore. Prints ``ran``."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from django_redis_locks import SemaphoreCommandMixin


class Command(SemaphoreCommandMixin, BaseCommand):
    semaphore_policy = "fail"

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("word", nargs="?", default="ran")

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(options["word"])

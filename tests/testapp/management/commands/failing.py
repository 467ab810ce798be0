"""Raises in ``handle()``: RuntimeError, or CommandError with ``--command-error``."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_redis_locks import SemaphoreCommandMixin


class Command(SemaphoreCommandMixin, BaseCommand):
    semaphore_limit = 2

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--command-error", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        assert self.semaphore is not None and self.semaphore.ensure_held() > 0
        if options["command_error"]:
            raise CommandError("failing on purpose")
        raise RuntimeError("failing on purpose")

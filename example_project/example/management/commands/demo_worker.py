"""One background worker of the demo; it runs until SIGTERM (or Ctrl-C).

- ``task``: enqueue the ``rebuild_index`` task again and again (run at once by the
  ImmediateBackend); enqueues that find the index queued or being rebuilt are skipped;
- ``command``: run ``manage.py import_feed`` again and again, as cron would; with more of
  these workers than the command's limit of 2, copies wait for a slot;
- ``http``: request ``/orders/<id>/charge/`` and ``/acharge/`` for the same order, the
  second 50 ms after the first, so the second one usually gets 409.

What they see goes to the demo's log (``example.holds``). ``run_demo.py`` starts each worker
in a process group of its own and stops it with SIGTERM to the group.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from argparse import ArgumentParser
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand

from example.holds import record

MANAGE = Path(__file__).resolve().parents[3] / "manage.py"
INDEXES = ("products", "customers")
FEEDS = ("prices", "stock", "reviews")
ORDERS = (1, 2, 3)
VIEWS = ("charge", "acharge")


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # KeyboardInterrupt, not SystemExit: a task backend records SystemExit as a failed task,
    # while KeyboardInterrupt unwinds through @redis_lock, which releases the lock.
    raise KeyboardInterrupt


class Command(BaseCommand):
    help = "A demo worker: ROLE is task, command or http. Runs until SIGTERM."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("role", choices=["task", "command", "http"])
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="for http")

    def handle(self, *args: Any, **options: Any) -> None:
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            if options["role"] == "task":
                run_tasks()
            elif options["role"] == "command":
                run_commands()
            else:
                request_views(options["url"])
        except KeyboardInterrupt:
            pass


def run_tasks() -> None:
    from example.tasks import TaskResultStatus, rebuild_index

    while True:
        result = rebuild_index.enqueue(random.choice(INDEXES))
        if result is None:  # queued or running already (on_conflict="skip")
            record(type="skip", by="task")
        elif result.status == TaskResultStatus.FAILED:
            record(type="error", by="task", detail=result.errors[-1].traceback.splitlines()[-1])
        time.sleep(random.uniform(0.05, 0.2))


def run_commands() -> None:
    run: subprocess.Popen[bytes] | None = None
    try:
        while True:
            run = subprocess.Popen(
                [sys.executable, str(MANAGE), "import_feed", random.choice(FEEDS)]
            )
            if (code := run.wait()) != 0:
                record(type="error", by="command", detail=f"manage.py import_feed exited {code}")
    finally:
        # SIGTERM went to the whole process group: the run gives its slot back and exits 143.
        # Wait for it, so that no process of this group outlives its leader.
        if run is not None:
            run.wait()


def request_views(base_url: str) -> None:
    with ThreadPoolExecutor(2) as pool:
        while True:
            order = random.choice(ORDERS)
            views = random.sample(VIEWS, 2)  # which one asks first: it usually gets the lock
            first = pool.submit(fetch, f"{base_url}/orders/{order}/{views[0]}/")
            time.sleep(0.05)
            second = pool.submit(fetch, f"{base_url}/orders/{order}/{views[1]}/")
            for view, future in zip(views, (first, second), strict=True):
                if (answer := future.result()) is not None:
                    status, retry_after = answer
                    record(type="request", view=view, status=status, retry_after=retry_after)
            time.sleep(random.uniform(0.0, 0.3))


def fetch(url: str) -> tuple[int, str | None] | None:
    """GET url: (status, Retry-After), or None when the server cannot be reached (yet)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers.get("Retry-After")
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers.get("Retry-After")
    except OSError:
        time.sleep(0.2)  # the web server is starting, or stopping
        return None

"""A ``hold_lost`` receiver that uses the database, in a real process with a file database.

Takes an auto-renewed lock, deletes its key behind its back, waits for the loss to be
reported, then for the database connection that the receiver opened to be closed (at most
3 s). Prints JSON: the threads where connections were opened (but the main one), whether
each is still open, and the receiver's thread.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from django.core.management.base import BaseCommand
from django.db import connection
from django.db.backends.signals import connection_created

from django_redis_locks import Lock
from django_redis_locks.signals import hold_lost


class Command(BaseCommand):
    help = "Report whether a hold_lost receiver's database connection is left open."

    def handle(self, *args: Any, **options: Any) -> None:
        opened: list[tuple[str, Any]] = []
        ran_in: list[str] = []

        def on_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
            opened.append((threading.current_thread().name, connection))

        def receiver(sender: Any, **kwargs: Any) -> None:
            ran_in.append(threading.current_thread().name)
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")

        connection_created.connect(on_connection)
        hold_lost.connect(receiver)
        lock = Lock("orm-receiver", timeout=0.6, auto_renew=True)
        assert lock.acquire()
        hold = lock._current_hold()
        assert hold is not None
        lock.backend.client.delete(lock._keys_for(lock.backend).lock)
        assert hold.lost_event.wait(5), "the loss was not reported"
        elsewhere = [(name, conn) for name, conn in opened if name != "MainThread"]
        deadline = time.monotonic() + 3
        while any(conn.connection is not None for _, conn in elsewhere):
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        report = {
            "receiver_ran_in": ran_in,
            "connections_opened_in": [name for name, _ in elsewhere],
            "still_open": [conn.connection is not None for _, conn in elsewhere],
        }
        self.stdout.write(json.dumps(report))

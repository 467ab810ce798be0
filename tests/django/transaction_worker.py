"""A process of the lost-update race on PostgreSQL (``test_transactions_postgres.py``).

``python -m tests.django.transaction_worker <mode> <postgres port> <redis url> <namespace>
<rounds>``; mode "return" (the hold released when the decorated function returns),
"commit" (``release_on_commit=True``) or "close" (one hold, then the connection closed inside
its transaction; prints whether Redis still had the hold after the close).

Each round is one transaction: the decorated function reads the counter row, adds one and
writes it back under the lock; then the transaction does 20 ms of other work and commits.
The worker says it is ready (``INCR <namespace>:ready``) and starts when both are.
"""

from __future__ import annotations

import json
import sys
import time

import django
import redis
from django.conf import settings


def main() -> None:
    mode, port, redis_url, namespace, rounds = sys.argv[1:6]
    settings.configure(
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": "postgres",
                "USER": "postgres",
                "HOST": "127.0.0.1",
                "PORT": port,
            }
        },
        CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_url}},
        INSTALLED_APPS=["django_redis_locks"],
        DJANGO_REDIS_LOCKS={"NAMESPACE": namespace},
        USE_TZ=True,
    )
    django.setup()
    from django.db import connection, transaction

    from django_redis_locks import redis_lock
    from django_redis_locks.inspection import get_lock

    @redis_lock("counter", blocking=True, blocking_timeout=60, release_on_commit=mode != "return")
    def increment() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT value FROM counter WHERE id = 1")
            (value,) = cursor.fetchone()
            cursor.execute("UPDATE counter SET value = %s WHERE id = 1", [value + 1])

    if mode == "close":
        with transaction.atomic():
            increment()
            before = get_lock("counter") is not None
            connection.close()
            after = get_lock("counter") is not None
        print(json.dumps({"held_before_close": before, "held_after_close": after}))
        return

    client = redis.Redis.from_url(redis_url)
    client.incr(f"{namespace}:ready")
    deadline = time.monotonic() + 60
    while int(client.get(f"{namespace}:ready") or 0) < 2:  # (the other worker)
        if time.monotonic() > deadline:
            raise SystemExit("the other worker never came")
        time.sleep(0.01)
    for _ in range(int(rounds)):
        with transaction.atomic():
            increment()
            time.sleep(0.02)  # the rest of the transaction's work, before its commit


if __name__ == "__main__":
    main()

"""Worker processes for the contention tests: ``python -m tests.core.workers <job> ...``.

Each job uses the Django-free core only, so a worker starts fast.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import redis

from django_redis_locks.core import Backend, Lock


def increment(url: str, namespace: str, counter: str, times: int) -> None:
    """Read-modify-write ``counter`` ``times`` times, each under the lock (the coredis example)."""
    client = redis.Redis.from_url(url, socket_timeout=10)
    backend = Backend(client, namespace=namespace)
    lock = Lock(f"increment:{counter}", client=backend, timeout=10)
    for _ in range(times):
        with lock:
            value = int(client.get(counter) or 0)
            client.set(counter, value + 1)
    client.close()


def hold(url: str, namespace: str, name: str, seconds: float) -> None:
    """Take ``name``, print its fence as JSON, hold it ``seconds``, release."""
    client = redis.Redis.from_url(url, socket_timeout=10)
    lock = Lock(name, client=Backend(client, namespace=namespace), timeout=30)
    with lock:
        print(json.dumps({"fence": lock.fence}), flush=True)
        time.sleep(seconds)  # the work done under the lock
    client.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="job", required=True)
    inc = sub.add_parser("increment")
    inc.add_argument("url")
    inc.add_argument("namespace")
    inc.add_argument("counter")
    inc.add_argument("times", type=int)
    hld = sub.add_parser("hold")
    hld.add_argument("url")
    hld.add_argument("namespace")
    hld.add_argument("name")
    hld.add_argument("seconds", type=float)
    args = parser.parse_args(argv)
    if args.job == "increment":
        increment(args.url, args.namespace, args.counter, args.times)
    else:
        hold(args.url, args.namespace, args.name, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Worker processes for tests that need other processes: ``python -m tests.core.workers <job>``.

Each job uses the Django-free core only, so a worker starts fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

import redis

from django_redis_locks.core import Backend, Lock, LockLost, Semaphore
from tests.harness.acl import unrestricted_url


def increment(url: str, namespace: str, counter: str, times: int) -> None:
    """Read-modify-write ``counter`` ``times`` times, each under the lock (the coredis example)."""
    client = redis.Redis.from_url(url, socket_timeout=10)
    data = redis.Redis.from_url(unrestricted_url(url), socket_timeout=10)  # the test's counter
    backend = Backend(client, namespace=namespace)
    lock = Lock(f"increment:{counter}", client=backend, timeout=10)
    for _ in range(times):
        with lock:
            value = int(data.get(counter) or 0)
            data.set(counter, value + 1)
    client.close()
    data.close()


def hold(url: str, namespace: str, name: str, seconds: float) -> None:
    """Take ``name``, print its fence as JSON, hold it ``seconds``, release."""
    client = redis.Redis.from_url(url, socket_timeout=10)
    lock = Lock(name, client=Backend(client, namespace=namespace), timeout=30)
    with lock:
        print(json.dumps({"fence": lock.fence}), flush=True)
        time.sleep(seconds)  # the work done under the lock
    client.close()


def hold_renewed(url: str, namespace: str, name: str, kind: str, timeout: float) -> int:
    """Take lock (or 1-slot semaphore) ``name`` with auto-renewal and wait until it is lost.

    Prints one JSON line once held (``holder_id``, ``pid``), one when its ``on_lost`` callback
    fires (``lost``: the reason), and a last one saying what ``ensure_held()`` raised then.
    Exits 1 if the hold was not lost within 60 s.
    """
    client = redis.Redis.from_url(url, socket_timeout=10)
    backend = Backend(client, namespace=namespace)
    lost = threading.Event()

    def on_lost(primitive: Any, reason: str) -> None:
        print(json.dumps({"lost": reason}), flush=True)
        lost.set()

    primitive: Lock | Semaphore
    if kind == "lock":
        primitive = Lock(name, client=backend, timeout=timeout, auto_renew=True, on_lost=on_lost)
    else:
        primitive = Semaphore(
            name, 1, client=backend, timeout=timeout, auto_renew=True, on_lost=on_lost
        )
    primitive.acquire()
    print(json.dumps({"holder_id": primitive.holder_id, "pid": os.getpid()}), flush=True)
    if not lost.wait(60):
        primitive.release()
        return 1
    try:
        primitive.ensure_held()
    except LockLost:
        print(json.dumps({"ensure_held": "LockLost"}), flush=True)
    else:
        print(json.dumps({"ensure_held": "no error"}), flush=True)
    client.close()
    return 0


def wait(url: str, namespace: str, name: str, kind: str, timeout: float) -> None:
    """Wait for lock (or 1-slot semaphore) ``name`` as long as it takes, then hold it for a
    minute: a waiter for tests to kill while it is queued."""
    client = redis.Redis.from_url(url, socket_timeout=10)
    backend = Backend(client, namespace=namespace)
    primitive: Lock | Semaphore = (
        Lock(name, client=backend, timeout=timeout)
        if kind == "lock"
        else Semaphore(name, 1, client=backend, timeout=timeout)
    )
    primitive.acquire()
    print(json.dumps({"acquired": primitive.holder_id}), flush=True)
    time.sleep(60)


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
    renewed = sub.add_parser("hold-renewed")
    renewed.add_argument("url")
    renewed.add_argument("namespace")
    renewed.add_argument("name")
    renewed.add_argument("kind", choices=["lock", "semaphore"])
    renewed.add_argument("timeout", type=float)
    waiter = sub.add_parser("wait")
    waiter.add_argument("url")
    waiter.add_argument("namespace")
    waiter.add_argument("name")
    waiter.add_argument("kind", choices=["lock", "semaphore"])
    waiter.add_argument("timeout", type=float)
    args = parser.parse_args(argv)
    if args.job == "wait":
        wait(args.url, args.namespace, args.name, args.kind, args.timeout)
    elif args.job == "increment":
        increment(args.url, args.namespace, args.counter, args.times)
    elif args.job == "hold":
        hold(args.url, args.namespace, args.name, args.seconds)
    else:
        return hold_renewed(args.url, args.namespace, args.name, args.kind, args.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

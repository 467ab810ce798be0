"""Worker processes for the semaphore tests: ``python -m tests.core.sem_workers <job> ...``.

Each job uses the Django-free core only, so a worker starts fast.

- ``churn``: take and give back a slot again and again, logging each hold as
  ``S <monotonic ns>`` / ``E <monotonic ns>`` lines (``K`` before killing itself with SIGKILL
  while holding, at acquisition ``--kill-at``); ``--server-clock`` logs the Redis server's
  clock instead (for processes whose own clock is shifted).
- ``hold``: take a slot, print a JSON line, then obey commands read from stdin, one per line
  (``refresh``, ``release``, ``ensure``, ``try``, ``count``, ``exit``), answering each with a
  JSON line ``{"ok": ..., "error": <exception class name or null>}``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import redis

from django_redis_locks.core import Backend, Semaphore


def _semaphore(args: argparse.Namespace, client: redis.Redis, **kwargs: Any) -> Semaphore:
    backend = Backend(client, namespace=args.namespace)
    return Semaphore(args.name, args.limit, client=backend, timeout=args.ttl, **kwargs)


def churn(args: argparse.Namespace) -> None:
    client = redis.Redis.from_url(args.url, socket_timeout=10)
    semaphore = _semaphore(args, client)

    def now() -> int:
        if args.server_clock:
            seconds, micros = client.time()
            return int(seconds) * 1_000_000_000 + int(micros) * 1000
        return time.monotonic_ns()

    with open(args.log, "a", buffering=1) as log:
        for index in range(args.acquisitions):
            semaphore.acquire()
            log.write(f"S {now()}\n")
            if index == args.kill_at:
                log.write("K\n")
                log.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(args.work)  # the work done while holding the slot
            log.write(f"E {now()}\n")
            semaphore.release()
    client.close()


def hold(args: argparse.Namespace) -> None:
    client = redis.Redis.from_url(args.url, socket_timeout=10)
    semaphore = _semaphore(args, client)
    other = _semaphore(args, client, blocking=False)
    acquired = semaphore.acquire(blocking=False)
    print(json.dumps({"acquired": acquired, "holder_id": semaphore.holder_id}), flush=True)
    actions: dict[str, Callable[[], object]] = {
        "refresh": semaphore.refresh,
        "release": semaphore.release,
        "ensure": semaphore.ensure_held,
        "try": other.acquire,
        "count": semaphore.count,
    }
    for line in sys.stdin:
        command = line.strip()
        if command == "exit":
            break
        answer: dict[str, object]
        try:
            answer = {"ok": actions[command](), "error": None}
        except Exception as exc:
            answer = {"ok": None, "error": type(exc).__name__}
        print(json.dumps(answer), flush=True)
    client.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="job", required=True)
    for job in ("churn", "hold"):
        command = sub.add_parser(job)
        command.add_argument("url")
        command.add_argument("namespace")
        command.add_argument("name")
        command.add_argument("--limit", type=int, required=True)
        command.add_argument("--ttl", type=float, required=True)
        if job == "churn":
            command.add_argument("--acquisitions", type=int, required=True)
            command.add_argument("--log", required=True)
            command.add_argument("--work", type=float, default=0.002)
            command.add_argument("--kill-at", type=int, default=-1)
            command.add_argument("--server-clock", action="store_true")
    args = parser.parse_args(argv)
    {"churn": churn, "hold": hold}[args.job](args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The worker of the Cluster churn scenario: ``python -m tests.chaos.cluster_workers ...``.

One process, one Backend on a cluster client of its own (logged in from ``--url``, as the
library's ACL user in the suite's ACL mode). It subscribes for wake-ups first (on the node
serving its own channel) and logs the channel, then, until ``--stop-file`` exists, picks one of
``--targets`` at random, by weight (a lock, or a semaphore of some limit), takes it with a
blocking acquire, holds it for a short or (``--long-share`` of the time) a long while, and
releases. Once the stop file exists, a hold still granted is released at once, so the queues
drain quickly.

Log (one event per line; times ``time.monotonic_ns()``, one clock for every process on the
machine): ``P <pid>``; ``C <channel>`` the wake-up channel; ``A <ns> <name>`` an acquire
begins; ``S <ns> <name>`` it returned holding; ``T <ns> <name>`` it gave up waiting; ``E <ns>``
the work is done, before the release; ``R <ns>`` released; ``L <ns>`` the release found the
hold lost; ``F <ns> <operation> <error>`` a call failed with LockBackendError.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import redis.cluster

from django_redis_locks.core import Backend, Lock, LockBackendError, LockLost, Semaphore
from tests.chaos.workers import EventLog


def churn(args: argparse.Namespace) -> int:
    client = redis.cluster.RedisCluster.from_url(
        args.url, socket_timeout=args.socket_timeout, socket_connect_timeout=args.socket_timeout
    )
    backend = Backend(client, namespace=args.namespace)
    given = json.loads(args.targets)
    targets = [(str(name), int(limit)) for name, limit, _ in given]
    weights = [float(weight) for _, _, weight in given]
    rng = random.Random(args.seed)
    log = EventLog(args.log)
    log.write("P", os.getpid())
    hub = backend.hub()
    if not hub.wait_ready(10):
        raise SystemExit(f"the wake-up subscription on {hub.channel} is not up after 10 s")
    log.write("C", hub.channel)
    stop = Path(args.stop_file)
    while not stop.exists():
        name, limit = rng.choices(targets, weights)[0]
        long = rng.random() < args.long_share
        work = rng.uniform(*(args.long if long else args.short))
        held: Lock | Semaphore
        if limit == 0:
            held = Lock(name, client=backend, timeout=args.ttl)
        else:
            held = Semaphore(name, limit, client=backend, timeout=args.ttl)
        log.write("A", time.monotonic_ns(), name)
        try:
            acquired = held.acquire(timeout=args.acquire_wait)
        except LockBackendError as exc:
            log.write("F", time.monotonic_ns(), "acquire", type(exc).__name__)
            continue
        if not acquired:
            log.write("T", time.monotonic_ns(), name)
            continue
        log.write("S", time.monotonic_ns(), name)
        if stop.exists():
            work = 0.0  # the churn is over: let the queues drain quickly
        time.sleep(work)  # the work done under the hold
        log.write("E", time.monotonic_ns())
        try:
            held.release()
            log.write("R", time.monotonic_ns())
        except LockLost:
            log.write("L", time.monotonic_ns())
        except LockBackendError as exc:
            log.write("F", time.monotonic_ns(), "release", type(exc).__name__)
    log.close()
    backend.close()
    client.close()
    return 0


def _span(text: str) -> tuple[float, float]:
    low, high = (float(part) for part in text.split(","))
    return low, high


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.cluster_workers")
    parser.add_argument("--url", required=True, help="a cluster URL (any node)")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--targets", required=True, help="JSON: [[name, limit, weight], ...]")
    parser.add_argument("--ttl", type=float, required=True)
    parser.add_argument("--short", type=_span, required=True, help="MIN,MAX seconds of work")
    parser.add_argument("--long", type=_span, required=True, help="MIN,MAX seconds of work")
    parser.add_argument("--long-share", type=float, required=True)
    parser.add_argument("--acquire-wait", type=float, default=10.0)
    parser.add_argument("--socket-timeout", type=float, default=5.0)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--stop-file", required=True)
    return churn(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

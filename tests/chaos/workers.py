"""Worker processes of the fault-injection scenarios: ``python -m tests.chaos.workers <job>``.

Workers use the Django-free core (``holder --db`` sets Django up for its ORM writes only).
Logs are text files, one event per line, written line by line so that a SIGKILL loses at most
the line being written; times are ``time.monotonic_ns()`` (one clock for every process on the
machine) unless a job says it logs the Redis server's clock.

- ``increment``: read-modify-write increments of a counter under one lock (scenario 1).
- ``cycle``: acquire an auto-renewed lock, work checking ``ensure_held()``, release, again and
  again until a stop file appears, logging every failure with its duration (scenarios 3, 10
  and 11; ``--fresh``: a new Lock object per attempt, as web requests make their own;
  ``--limit``: a semaphore slot instead; ``--django``: the Backend of a Django project's lock
  alias, settings from :mod:`tests.harness.django_caches`, as in scenarios 12 and 13).
- ``holder``: take a lock or a semaphore slot, then obey commands read from stdin, one per
  line, answering each with a JSON line; lost holds are reported as they happen
  (scenarios 2 and 4).
- ``sem-churn``: take and give back a semaphore slot again and again, logging each hold on
  the Redis server's clock, so that processes with skewed clocks share one timeline
  (scenario 8).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import redis

from django_redis_locks.core import (
    Backend,
    Lock,
    LockBackendError,
    LockError,
    LockLost,
    LockNotReplicated,
    Semaphore,
)


class EventLog:
    """A line-buffered log file that several threads may write to."""

    def __init__(self, path: str) -> None:
        self._file: TextIO = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._mutex = threading.Lock()

    def write(self, *fields: object) -> None:
        line = " ".join(str(field) for field in fields) + "\n"
        with self._mutex:
            self._file.write(line)

    def close(self) -> None:
        self._file.close()


def _client(url: str, socket_timeout: float) -> redis.Redis:
    return redis.Redis.from_url(
        url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout
    )


# -- scenario 1 ----------------------------------------------------------------------------
def increment(args: argparse.Namespace) -> int:
    """``--sections`` read-modify-write increments of ``--counter``, each under the lock.

    Each section reads the counter, works (``--work`` seconds), then writes counter + 1 and
    appends its id to the ``--done`` list in one MULTI/EXEC, so Redis knows exactly which
    sections completed. Log: ``S <ns> <fence> <section id>`` once held, ``E <ns>`` after the
    write, ``L`` when the release found the hold lost. The lock runs on ``--url``; the counter
    and the list are read and written through ``--data-url`` (the test's bookkeeping: in the
    suite's ACL mode the library's user may run its scripts only).
    """
    client = _client(args.url, 10)
    data = _client(args.data_url or args.url, 10)
    lock = Lock(args.name, client=Backend(client, namespace=args.namespace), timeout=args.ttl)
    log = EventLog(args.log)
    log.write("P", os.getpid())
    for index in range(args.first, args.first + args.sections):
        section = f"{args.who}:{index}"
        lock.acquire()
        log.write("S", time.monotonic_ns(), lock.fence, section)
        value = int(data.get(args.counter) or 0)
        time.sleep(args.work)  # the work of the section, between the read and the write
        with data.pipeline(transaction=True) as pipe:
            pipe.set(args.counter, value + 1)
            pipe.rpush(args.done, f"{section}:{lock.fence}")
            pipe.execute()
        log.write("E", time.monotonic_ns())
        try:
            lock.release()
        except LockLost:
            log.write("L")
    log.close()
    data.close()
    client.close()
    return 0


# -- scenario 3 ----------------------------------------------------------------------------
def cycle(args: argparse.Namespace) -> int:
    """Hold an auto-renewed lock for ``--work`` seconds at a time until ``--stop-file`` exists.

    Log: ``S <ns> <fence>`` held; ``E <ns>`` work done, before the release; ``X <ns>``
    ``ensure_held()`` raised LockLost (the hold ends there); ``O <ns> <local expiry ns>``
    on_lost fired (from the renewer); ``R <ns>`` released; ``RL <ns>`` the release found the
    hold lost; ``F <operation> <start ns> <end ns>`` a call failed with LockBackendError
    (``acquire-unreplicated``: LockNotReplicated). A semaphore slot logs fence 0.
    """
    client, backend = _cycle_backend(args)
    log = EventLog(args.log)
    log.write("P", os.getpid())
    main = threading.current_thread()

    def on_lost(lock: Any, reason: str) -> None:
        hold = lock._holds.get(main)  # the hold as the renewer left it: its local expiry
        expires = int(hold.expires_at * 1e9) if hold is not None else -1
        log.write("O", time.monotonic_ns(), expires)

    def new_lock() -> Lock | Semaphore:
        if args.limit:
            return Semaphore(
                args.name,
                args.limit,
                client=backend,
                timeout=args.ttl,
                auto_renew=True,
                on_lost=on_lost,
            )
        replicas = args.wait_for_replicas
        return Lock(
            args.name,
            client=backend,
            timeout=args.ttl,
            auto_renew=True,
            on_lost=on_lost,
            wait_for_replicas=int(replicas) if replicas and replicas.isdigit() else replicas,
        )

    lock = new_lock()
    stop = Path(args.stop_file)

    def attempt(operation: str, call: Callable[[], Any]) -> tuple[bool, Any]:
        started = time.monotonic_ns()
        try:
            return True, call()
        except LockBackendError:
            log.write("F", operation, started, time.monotonic_ns())
            return False, None
        except LockNotReplicated:
            log.write("F", f"{operation}-unreplicated", started, time.monotonic_ns())
            return False, None

    def take(lock: Lock | Semaphore) -> bool:
        if args.acquire_wait == 0:
            return lock.acquire(blocking=False)
        return lock.acquire(timeout=args.acquire_wait)

    while not stop.exists():
        if args.fresh:  # each attempt a new object, as each web request makes its own
            lock = new_lock()
        ok, acquired = attempt("acquire", lambda lock=lock: take(lock))  # type: ignore[misc]
        if not ok or not acquired:
            time.sleep(args.step)  # back-off before trying again, not a wait for state
            continue
        log.write("S", time.monotonic_ns(), getattr(lock, "fence", 0))
        deadline = time.monotonic() + args.work
        lost = False
        while time.monotonic() < deadline:
            time.sleep(args.step)  # a step of the work
            try:
                attempt("ensure", lock.ensure_held)
            except LockLost:
                log.write("X", time.monotonic_ns())
                lost = True
                break
        if lost:
            continue
        log.write("E", time.monotonic_ns())
        while True:  # a release that failed keeps the hold: try again
            try:
                ok, _ = attempt("release", lock.release)
            except LockLost:
                log.write("RL", time.monotonic_ns())
                break
            if ok:
                log.write("R", time.monotonic_ns())
                break
    log.close()
    if client is not None:
        client.close()
    return 0


def _cycle_backend(args: argparse.Namespace) -> tuple[redis.Redis | None, Backend]:
    """The ``cycle`` job's client (None: Django's) and Backend: on ``--url``, or, with
    ``--django``, the lock alias of a project configured from that JSON spec."""
    if not args.django:
        client = _client(args.url, args.socket_timeout)
        return client, Backend(client, namespace=args.namespace)
    import django
    from django.conf import settings

    from tests.harness.django_caches import ALIAS, cluster_settings, sentinel_settings

    spec = json.loads(args.django)
    common = {"socket_timeout": args.socket_timeout, "namespace": args.namespace}
    if spec["kind"] == "cluster":
        nodes = [(host, int(port)) for host, port in spec["nodes"]]
        project = cluster_settings(nodes=nodes, login=spec["login"], **common)
    else:
        sentinels = [(host, int(port)) for host, port in spec.pop("sentinels")]
        project = sentinel_settings(sentinels=sentinels, **spec, **common)
    settings.configure(INSTALLED_APPS=["django_redis_locks"], USE_TZ=True, **project)
    django.setup()
    from django_redis_locks.connection import get_backend

    return None, get_backend(ALIAS)


# -- scenarios 2 and 4 ---------------------------------------------------------------------
def _setup_django(db: str) -> Any:
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["tests.chaos.fencing"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": db}},
        DEFAULT_AUTO_FIELD="django.db.models.AutoField",
        USE_TZ=True,
    )
    django.setup()
    from django.core.management import call_command

    from tests.chaos.fencing.models import Account

    call_command("migrate", run_syncdb=True, verbosity=0)
    Account.objects.get_or_create(pk=1)
    return Account


def holder(args: argparse.Namespace) -> int:
    """Take a lock (or a slot of semaphore ``--limit``), then obey commands from stdin.

    Prints JSON lines: ``{"event": "held", ...}`` once held, ``{"event": "lost", ...}`` when
    on_lost fires, ``{"event": "answer", "command": ..., "ok": ..., "error": ...}`` per
    command: ``ensure``, ``extend``, ``release``, ``write <balance>`` (the fenced ORM update of
    docs/guarantees.md, ``ok``: rows updated), ``read``, ``exit``.
    """
    account = _setup_django(args.db) if args.db else None
    client = _client(args.url, args.socket_timeout)
    backend = Backend(client, namespace=args.namespace)
    out = threading.Lock()

    def say(**fields: Any) -> None:
        with out:
            print(json.dumps(fields), flush=True)

    def on_lost(primitive: Any, reason: str) -> None:
        say(event="lost", reason=reason, at=time.monotonic_ns())

    primitive: Lock | Semaphore
    if args.kind == "lock":
        primitive = Lock(
            args.name,
            client=backend,
            timeout=args.ttl,
            auto_renew=args.auto_renew,
            on_lost=on_lost,
        )
    else:
        primitive = Semaphore(
            args.name,
            args.limit,
            client=backend,
            timeout=args.ttl,
            auto_renew=args.auto_renew,
            on_lost=on_lost,
        )
    acquired = primitive.acquire(timeout=args.blocking_timeout)
    fence = primitive.fence if isinstance(primitive, Lock) else None
    say(
        event="held",
        acquired=acquired,
        fence=fence,
        holder_id=primitive.holder_id,
        pid=os.getpid(),
        at=time.monotonic_ns(),
    )

    def write(balance: str) -> object:
        # The fencing check of docs/guarantees.md: only a holder newer than the last writer
        # may write; a stale holder's fence is not larger, and its update changes no row.
        assert account is not None and fence is not None
        return account.objects.filter(pk=1, fence__lt=fence).update(balance=balance, fence=fence)

    def read() -> object:
        assert account is not None
        row = account.objects.get(pk=1)
        return {"balance": str(row.balance), "fence": row.fence}

    def extend() -> object:
        if isinstance(primitive, Lock):
            return primitive.extend(args.ttl)
        return primitive.refresh()

    actions: dict[str, Callable[..., object]] = {
        "ensure": primitive.ensure_held,
        "extend": extend,
        "release": primitive.release,
        "write": write,
        "read": read,
    }
    for line in sys.stdin:
        command, *rest = line.split()
        if command == "exit":
            break
        try:
            say(event="answer", command=command, ok=actions[command](*rest), error=None)
        except LockError as exc:
            say(event="answer", command=command, ok=None, error=type(exc).__name__)
    client.close()
    return 0


# -- scenario 8 ----------------------------------------------------------------------------
def sem_churn(args: argparse.Namespace) -> int:
    """``--acquisitions`` holds of a semaphore slot, each logged on the server's clock.

    Log: ``S <server ns>`` once held, ``E <server ns>`` after the work, then ``R`` (released)
    or ``L`` (the release found the slot lost: it expired while this process was stopped).
    """
    client = _client(args.url, 10)
    semaphore = Semaphore(
        args.name, args.limit, client=Backend(client, namespace=args.namespace), timeout=args.ttl
    )

    def server_now() -> int:
        seconds, micros = client.time()
        return int(seconds) * 1_000_000_000 + int(micros) * 1000

    log = EventLog(args.log)
    log.write("P", os.getpid())
    for _ in range(args.acquisitions):
        semaphore.acquire()
        log.write("S", server_now())
        time.sleep(args.work)  # the work done while holding the slot
        log.write("E", server_now())
        try:
            semaphore.release()
            log.write("R")
        except LockLost:
            log.write("L")
    log.close()
    client.close()
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.workers")
    sub = parser.add_subparsers(dest="job", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default="")
    common.add_argument("--namespace", required=True)
    common.add_argument("--name", required=True)
    common.add_argument("--ttl", type=float, required=True)

    inc = sub.add_parser("increment", parents=[common])
    inc.add_argument("--data-url", default="", help="for the counter (default: --url)")
    inc.add_argument("--counter", required=True)
    inc.add_argument("--done", required=True)
    inc.add_argument("--sections", type=int, required=True)
    inc.add_argument("--first", type=int, default=0)
    inc.add_argument("--work", type=float, default=0.0005)
    inc.add_argument("--log", required=True)
    inc.add_argument("--who", required=True)
    inc.set_defaults(run=increment)

    cyc = sub.add_parser("cycle", parents=[common])
    cyc.add_argument("--socket-timeout", type=float, required=True)
    cyc.add_argument("--work", type=float, required=True)
    cyc.add_argument("--step", type=float, default=0.05)
    cyc.add_argument("--acquire-wait", type=float, default=5.0, help="0: do not block")
    cyc.add_argument("--log", required=True)
    cyc.add_argument("--stop-file", required=True)
    cyc.add_argument("--fresh", action="store_true", help="a new Lock object per attempt")
    cyc.add_argument("--limit", type=int, default=0, help="a semaphore of this limit")
    cyc.add_argument("--wait-for-replicas", default=None, help="an int or 'majority'")
    cyc.add_argument("--django", default="", help="JSON: kind, service, sentinels, login")
    cyc.set_defaults(run=cycle)

    hold = sub.add_parser("holder", parents=[common])
    hold.add_argument("--kind", choices=["lock", "semaphore"], default="lock")
    hold.add_argument("--limit", type=int, default=1)
    hold.add_argument("--auto-renew", action="store_true")
    hold.add_argument("--socket-timeout", type=float, default=5.0)
    hold.add_argument("--blocking-timeout", type=float, default=30.0)
    hold.add_argument("--db", default="")
    hold.set_defaults(run=holder)

    churn = sub.add_parser("sem-churn", parents=[common])
    churn.add_argument("--limit", type=int, required=True)
    churn.add_argument("--acquisitions", type=int, required=True)
    churn.add_argument("--work", type=float, default=0.01)
    churn.add_argument("--log", required=True)
    churn.set_defaults(run=sem_churn)

    args = parser.parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

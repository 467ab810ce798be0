"""A greenlet-patched process that uses locks the way gevent and eventlet workers do.

Run as ``python -m tests.core.green_worker <gevent|eventlet> <early|late> <redis url>
<namespace> [<parser>]``: ``early`` monkey-patches before importing the library, ``late`` after
(and after the library made its first hold, as code imported by a pre-loading master would);
``parser`` ``python`` gives the client redis-py's pure-Python parser (what it uses without
hiredis), else the default. It prints one JSON line with what it saw and exits 0 when every
check held.

The checks: renewed holds of the main greenlet and of spawned greenlets survive several TTLs
while other greenlets keep trying to take them; blocked waiters are woken by releases (the
wake-up listener is a greenlet too) well before their re-check; nothing raises.
"""

from __future__ import annotations

import json
import sys
import time

FLAVOUR, WHEN, URL, NAMESPACE = sys.argv[1:5]
PARSER = sys.argv[5] if len(sys.argv) > 5 else "default"
TTL = 0.6
WORK = 2.0  # more than three TTLs


def patch() -> None:
    if FLAVOUR == "gevent":
        from gevent import monkey

        monkey.patch_all()
    else:
        import eventlet

        eventlet.monkey_patch()


if WHEN == "early":
    patch()

import redis  # noqa: E402

from django_redis_locks.core import Backend, Lock  # noqa: E402

if PARSER == "python":
    from redis._parsers import _RESP2Parser

    client = redis.Redis.from_url(URL, socket_timeout=5, parser_class=_RESP2Parser)
else:
    client = redis.Redis.from_url(URL, socket_timeout=5)
backend = Backend(client, namespace=NAMESPACE)
if WHEN == "late":
    # The library already worked (and made its background machinery) before the patch.
    warm = Lock("warm-up", client=backend, timeout=1, auto_renew=True)
    warm.acquire()
    warm.release()
    patch()

if FLAVOUR == "gevent":
    import gevent

    spawn, joinall, sleep = gevent.spawn, gevent.joinall, gevent.sleep
else:
    import eventlet

    def joinall(threads: list) -> None:  # type: ignore[type-arg]
        for thread in threads:
            thread.wait()

    spawn, sleep = eventlet.spawn, eventlet.sleep

seen: dict[str, object] = {"stolen": 0, "errors": []}


def hold(name: str) -> None:
    """Hold ``name`` with auto-renewal for WORK seconds while another greenlet tries it."""
    try:
        lock = Lock(name, client=backend, timeout=TTL, auto_renew=True)
        assert lock.acquire()
        rival = spawn(try_to_steal, name)
        sleep(WORK)
        rival.kill()  # before the release: after it, the rival may take the name fairly
        lock.ensure_held()
        lock.release()
    except Exception as exc:
        seen["errors"].append(f"{name}: {type(exc).__name__}: {exc}")  # type: ignore[attr-defined]


def try_to_steal(name: str) -> None:
    thief = Lock(name, client=backend, timeout=TTL, blocking=False)
    while True:
        if thief.acquire():
            seen["stolen"] = int(seen["stolen"]) + 1  # type: ignore[call-overload]
            thief.release()
        sleep(0.05)


def handover() -> float:
    """A blocked waiter greenlet, woken by a release: the seconds from release to grant."""
    holder = Lock("baton", client=backend, timeout=5)
    assert holder.acquire()
    got: list[float] = []

    def wait() -> None:
        waiter = Lock("baton", client=backend, timeout=5)
        waiter.recheck_seconds = 30  # type: ignore[misc]  # only a wake-up can be fast
        assert waiter.acquire(timeout=10)
        got.append(time.monotonic())
        waiter.release()

    waiter = spawn(wait)
    sleep(0.5)  # it queues and blocks on its wake-up
    released = time.monotonic()
    holder.release()
    joinall([waiter])
    return got[0] - released


threads = [spawn(hold, f"green-{i}") for i in range(5)]
hold("main")  # the main greenlet holds one too
joinall(threads)
seen["handover_s"] = round(handover(), 4)
print(json.dumps(seen))
ok = not seen["errors"] and seen["stolen"] == 0 and float(seen["handover_s"]) < 1.0  # type: ignore[arg-type]
sys.exit(0 if ok else 1)

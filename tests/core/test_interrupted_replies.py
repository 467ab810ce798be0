"""An interruption landing inside the client library, after a request went out on a pooled
connection and before its reply was read, leaves no reply behind for the next call; and the
renewer's lanes outlive a reply that is not their script's.

redis-py disconnects a connection when an exception reaches it while sending or while reading
a reply, but a KeyboardInterrupt raised by a signal handler (or SystemExit, a gevent
``Timeout``, a ``GreenletExit``) can land between the two, in its own code. An outside review
found it by raising KeyboardInterrupt from a SIGALRM handler at random moments (1 run in 7):
the connection went back to the pool with the reply unread, the next call on it read that
reply as its own, other threads' acquires failed with a TypeError, releases reported a
force-release that never happened, and a name stayed held after every thread had stopped.

Every sync call the library makes now runs inside ``connection.interruptions.guard``, and the
pools of the clients it builds keep a connection released during that call out of the pool
until the call is over, disconnected first when anything but the client library's own errors
escaped it: no other call (another thread's, or the release the interruption triggers) can
read that reply. Here the interruption lands at that very point, every time: between a
release script's request and its reply, and (second point) inside a pipeline, between the
acquire script's reply and the reply of the ``WAIT`` sent after it.

The renewer's lane threads read replies too: one that is not its script's (the review saw a
lane die of it, redoing the interrupted release) is now treated like no reply, an unknown
outcome (logged; the hold keeps its last confirmed expiry; the look is sent again), and the
lane keeps running.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from django_redis_locks.core import Backend, Lock
from django_redis_locks.core.connection.libraries import node_client
from django_redis_locks.core.runtime.renewal import renewer
from tests.harness.plugin import MakeServer
from tests.harness.servers import wait_until


def _gevent_timeout() -> BaseException:
    gevent = pytest.importorskip("gevent")
    return gevent.Timeout()  # type: ignore[no-any-return]  # (a BaseException, not started)


def _greenlet_exit() -> BaseException:
    greenlet = pytest.importorskip("greenlet")
    return greenlet.GreenletExit()  # type: ignore[no-any-return]


INTERRUPTIONS: dict[str, Callable[[], BaseException]] = {
    "KeyboardInterrupt": KeyboardInterrupt,
    "SystemExit": SystemExit,
    "gevent.Timeout": _gevent_timeout,
    "GreenletExit": _greenlet_exit,
}


def _interrupt_once(
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    interruption: BaseException,
    client_class: Any = redis.Redis,
) -> list[bool]:
    """Raise ``interruption`` in this thread right before the client library reads the reply
    of the next ``command`` (its request has gone out); the returned flag turns False once it
    did."""
    main = threading.get_ident()
    armed = [True]
    parse = client_class.parse_response

    def interrupted(self: Any, connection: Any, command_name: Any, **options: Any) -> Any:
        if armed[0] and threading.get_ident() == main and command_name == command:
            armed[0] = False
            raise interruption
        return parse(self, connection, command_name, **options)

    monkeypatch.setattr(client_class, "parse_response", interrupted)
    return armed


@pytest.mark.parametrize(
    ("kind", "package"),
    [(kind, "redis") for kind in INTERRUPTIONS] + [("KeyboardInterrupt", "valkey")],
)
def test_ctrl_c_between_a_scripts_request_and_its_reply_leaves_no_reply_for_the_next_call(
    make_server: MakeServer,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    package: str,
) -> None:
    interruption = INTERRUPTIONS[kind]()
    client_class = redis.Redis if package == "redis" else pytest.importorskip("valkey").Valkey
    server = make_server()
    direct = server.client(socket_timeout=5)  # (unrestricted: the library may be an ACL user)
    backend = Backend(client_class.from_url(server.url, socket_timeout=5), namespace=namespace)
    try:
        first = Lock("first", client=backend, timeout=30)
        assert first.acquire(blocking=False)  # (a release first: both scripts are on the server)
        first.release()
        assert first.acquire(blocking=False)
        armed = _interrupt_once(monkeypatch, "EVALSHA", interruption, client_class)
        with pytest.raises(type(interruption)):
            first.release()
        assert not armed[0]  # the interruption landed where it should

        second = Lock("second", client=backend, timeout=30)
        assert second.acquire(blocking=False)  # its own reply, not the release's
        second.release()
        keys = [first._keys_for(backend).lock, second._keys_for(backend).lock]
        assert not any(direct.hexists(key, "token") for key in keys)  # both free
    finally:
        backend.close()
        direct.close()


@pytest.mark.cluster
def test_ctrl_c_between_a_scripts_request_and_its_reply_on_a_cluster_node(
    redis_cluster: Any, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis_cluster.client(socket_timeout=5)
    backend = Backend(client, namespace=namespace)
    node_class = type(node_client(backend.client.get_default_node()))  # (redis-py or valkey-py)
    try:
        first = Lock("first", client=backend, timeout=30)
        node = backend.lane_name(first._keys_for(backend).lock)
        second = next(  # a name served by the same node
            lock
            for lock in (Lock(f"second-{i}", client=backend, timeout=30) for i in range(1000))
            if backend.lane_name(lock._keys_for(backend).lock) == node
        )
        assert first.acquire(blocking=False)  # (a release first: both scripts are on the node)
        first.release()
        assert first.acquire(blocking=False)
        armed = _interrupt_once(monkeypatch, "EVALSHA", KeyboardInterrupt(), node_class)
        with pytest.raises(KeyboardInterrupt):
            first.release()
        assert not armed[0]
        for _ in range(3):
            assert second.acquire(blocking=False)  # its own reply, not the release's
            second.release()
        for lock in (first, second):
            assert not client.hexists(lock._keys_for(backend).lock, "token")  # both free
    finally:
        backend.close()
        client.close()


def test_ctrl_c_inside_a_pipeline_between_two_replies_leaves_no_reply_for_the_next_call(
    make_server: MakeServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # wait_for_replicas: the acquire script and a WAIT go out in one pipeline; the
    # interruption lands after the script's reply was read, before the WAIT's (which comes
    # after replica_wait_timeout: the server has no replica).
    server = make_server()
    direct = server.client(socket_timeout=5)  # (unrestricted: the library may be an ACL user)
    client = redis.Redis.from_url(server.url, socket_timeout=5)
    backend = Backend(client, namespace=namespace, replica_wait_timeout=0.2)
    try:
        first = Lock("first", client=backend, timeout=30, wait_for_replicas=1)
        warm = Lock("warm", client=backend, timeout=30)
        assert warm.acquire(blocking=False)  # (every script on the server)
        warm.release()
        armed = _interrupt_once(monkeypatch, "WAIT", KeyboardInterrupt())
        with pytest.raises(KeyboardInterrupt):
            first.acquire(blocking=False)
        assert not armed[0]
        time.sleep(0.3)  # the WAIT's reply has come by now, for whoever reads it

        second = Lock("second", client=backend, timeout=30)
        for _ in range(3):  # (each call its own reply, whichever pooled connection it gets)
            assert second.acquire(blocking=False)
            second.release()
        keys = [first._keys_for(backend).lock, second._keys_for(backend).lock]
        assert not any(direct.hexists(key, "token") for key in keys)  # the acquire undone
    finally:
        backend.close()
        direct.close()


def _lane_threads(backend: Backend) -> list[threading.Thread | None]:
    return [lane._thread for lane in renewer()._all_lanes(backend)]


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_lane_thread_survives_replies_that_are_not_its_scripts(
    make_server: MakeServer,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The client library hands a lane another call's reply (what a reply left unread did
    # before the fix): a release's integer for a renewal, a renewal's array for a reclaim's
    # release. Injected at the client-library boundary, after the real reply was read.
    server = make_server()
    direct = server.client(socket_timeout=5)  # (unrestricted: the library may be an ACL user)
    backend = Backend(redis.Redis.from_url(server.url, socket_timeout=5), namespace=namespace)
    swapped = {"renewal": 0, "reclaim": 0}
    parse = redis.Redis.parse_response

    def wrong(self: Any, connection: Any, command_name: Any, **options: Any) -> Any:
        reply = parse(self, connection, command_name, **options)
        if command_name != "EVALSHA" or not threading.current_thread().name.startswith("drl-renew"):
            return reply
        if isinstance(reply, list) and swapped["renewal"] < 2:
            swapped["renewal"] += 1
            return 1  # a release's reply
        if isinstance(reply, int) and swapped["reclaim"] < 2:
            swapped["reclaim"] += 1
            return [1, 30_000, 1_700_000_000_000]  # a renewal's reply
        return reply

    monkeypatch.setattr(redis.Redis, "parse_response", wrong)
    caplog.set_level(logging.WARNING, logger="django_redis_locks.core.runtime.renewal")
    ttl = 1.5  # (renewed every 0.5 s; a shorter one ran out on a loaded machine)
    try:
        renewed = Lock("renewed", client=backend, timeout=ttl, auto_renew=True)
        assert renewed.acquire(blocking=False)
        # A reclaim of a token never granted: its looks end after its lifetime.
        never = Lock("never", client=backend, timeout=30)
        call = never._release_call(never._keys_for(backend), "never-granted-token")
        renewer().reclaim(backend, call, 1.0, "a test reclaim")
        lanes = _lane_threads(backend)
        assert len(lanes) == 1 and lanes[0] is not None

        wait_until(  # every wrong reply was read
            lambda: swapped == {"renewal": 2, "reclaim": 2}, timeout=10, what="wrong replies"
        )
        rounds = renewer().rounds_on(backend)
        wait_until(lambda: renewer().rounds_on(backend) > rounds + 1, timeout=5, what="rounds")
        assert _lane_threads(backend) == lanes and lanes[0].is_alive()  # the same thread
        assert renewed.ensure_held() > 0  # renewed after the wrong replies: never lost
        assert direct.pttl(renewed._keys_for(backend).lock) > 0
        deadline = time.monotonic() + 5
        while renewer().reclaiming(backend) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert renewer().reclaiming(backend) == 0  # the reclaim settled anyway
        unreadable = [r for r in caplog.records if "does not send" in r.getMessage()]
        assert len(unreadable) == 4
        renewed.release()
        assert not direct.hexists(renewed._keys_for(backend).lock, "token")
    finally:
        backend.close()
        direct.close()


#: The source files in whose functions an interruption is made to land, one point per call.
_POOL_CODE = ("queue.py", "threading.py", "interruptions.py", "connection.py")


def _interrupt_at_point(number: int, call: Callable[[], Any]) -> str | None:
    """Run ``call`` with a KeyboardInterrupt raised at the ``number``-th point, in the order it
    runs them, where a signal handler's exception can land in the pool's code (the client
    library's connection and pool module, the queue, threading, the library's interruption
    guard): as a function of those starts, or as it returns, right after the last call it
    made came back (CPython runs signal handlers there: at a function's start and after a
    call, not at every line); where it landed, or None if the call has fewer such points."""
    seen = [0]
    landed: list[str] = []

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "return" and not landed:
            seen[0] += 1
            if seen[0] == number:
                landed.append(f"{frame.f_code.co_filename}:{frame.f_lineno} (returning)")
                raise KeyboardInterrupt
        return local

    def calls(frame: Any, event: str, arg: Any) -> Any:
        if event != "call" or not frame.f_code.co_filename.endswith(_POOL_CODE):
            return None
        if _finalizing(frame):  # a collected pool of an earlier test, not the call's own
            return None
        if not landed:
            seen[0] += 1
            if seen[0] == number:
                landed.append(f"{frame.f_code.co_filename}:{frame.f_lineno} (starting)")
                raise KeyboardInterrupt
        return local

    sys.settrace(calls)
    try:
        call()
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
    return landed[0] if landed else None


def _finalizing(frame: Any) -> bool:
    """Whether ``frame`` runs inside a ``__del__`` (the garbage collector may run one at any
    point; an exception there is only printed, as "Exception ignored in")."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _cycle_once(lock: Lock, went_through: list[bool]) -> None:
    if lock.acquire(blocking=False):
        lock.release()
        went_through.append(True)


def test_an_interruption_at_any_point_of_the_pools_code_never_hangs_the_pool(
    make_server: MakeServer, namespace: str
) -> None:
    """A KeyboardInterrupt (or any exception a signal handler raises: Celery's soft time limit)
    landing at each point, in turn, of the pool code an acquire and a release run where a
    signal handler can run; after each, another thread's acquire and release must still go
    through. The blocking pool waited on a
    queue.LifoQueue whose threading.Condition is Python code: an interruption inside its
    __exit__ left its lock held, and every later call of the process waited forever (an
    outside review hung a process 3 runs in 3 with random SIGALRMs; here the point is hit)."""
    server = make_server()
    backend = Backend(redis.Redis.from_url(server.url, socket_timeout=2), namespace=namespace)
    try:
        probe = Lock("probe", client=backend, timeout=30)
        assert probe.acquire(blocking=False)  # (scripts loaded, connections made)
        probe.release()
        landings: list[str] = []
        for number in range(1, 400):
            lock = Lock(f"interrupted-{number}", client=backend, timeout=30)

            def cycle(lock: Lock = lock) -> None:
                if lock.acquire(blocking=False):
                    lock.release()

            result: list[str | None] = []
            interrupted = threading.Thread(
                target=lambda out, at, run: out.append(_interrupt_at_point(at, run)),
                args=(result, number, cycle),
            )
            interrupted.start()
            interrupted.join(timeout=5)
            assert result, f"the interrupted cycle hung (point {number} of the pool's code)"
            landed = result[0]
            if landed is None:
                break  # every point of a whole cycle had its turn
            landings.append(landed)
            went_through: list[bool] = []
            other = threading.Thread(target=_cycle_once, args=(probe, went_through))
            other.start()
            other.join(timeout=5)
            assert went_through == [True], f"the pool hung after an interruption at {landed}"
        assert len(landings) > 20, landings  # the interruptions landed in the pool's code
        assert any("queue.py" in where or "interruptions.py" in where for where in landings)
    finally:
        backend.close()

"""A connection that an interrupted call left with a reply unread never serves another call.

redis-py (and valkey-py) disconnect a connection when an exception reaches them while they
send a request or read its reply, but an exception raised from outside (a KeyboardInterrupt
or SystemExit from a signal handler, a gevent ``Timeout``, a ``GreenletExit``, Celery's
``SoftTimeLimitExceeded``) can land between the two, in the library's own code. The
connection then goes back to its pool with the reply unread, and the next call on it reads
that reply as its own. A pool's check for unread data when it hands a connection out
(``can_read()``) does not help when the reply has not arrived yet.

So every sync call the library makes runs inside :class:`guard`, and the pools of the sync
clients the library builds (:func:`guarded_pool`) keep a connection released during a
guarded call out of the pool until the call is over: back as it is when the call returned or
raised one of the client library's own errors (raised after the library dealt with its
connection: a reply read whole, or a connection it dropped), disconnected first when
anything else escaped the call. No other thread can take the connection in between, and the
uncontended path sends nothing more: one context-variable look-up in the pool's
``get_connection`` and ``release`` and one context-variable set per call.

A connection released during a guarded call goes back for good when the same call takes
another one (its exchange was over: a pipeline after a ``SCRIPT LOAD``, a Cluster client's
retry on another node), so a call never holds two connections of a pool of one.

The bounded pools (``BlockingConnectionPool``) wait for a free connection on a queue: redis-py
and valkey-py use ``queue.LifoQueue``, whose ``threading.Condition`` is Python code, so an
exception from a signal handler landing inside its ``__exit__`` left its lock held, and every
later call of the process (the renewer's too) waited forever. The pools the library builds
use :class:`SafeLifoQueue` instead, made of single C-level steps (a ``deque``'s ``append`` and
``pop``, a ``Lock`` as the wake-up signal): an interruption lands between two of them, never
inside one, so at worst one connection is lost to the pool, and a waiter never waits on a
signal stuck "nothing to take" for more than 50 ms before looking again.

Clients used as given (``bound_retries=False``, custom pools or connection classes) keep
their own pools: there the client library's behaviour applies.
"""

from __future__ import annotations

import inspect
import queue
import threading
import time
from collections import deque
from contextvars import ContextVar
from types import TracebackType
from typing import Any

from .libraries import backend_errors

__all__ = ["GuardedPool", "SafeLifoQueue", "guard", "guarded_pool"]

#: Longest a waiter for a free connection sleeps before it looks again (see the module).
_LOOK_AGAIN_SECONDS = 0.05


class SafeLifoQueue:
    """``queue.LifoQueue`` as the blocking pools use it (``put_nowait``, ``get``, ``get_nowait``,
    and the ``queue`` they read), made of single C-level steps (see the module)."""

    def __init__(self, maxsize: int = 0) -> None:
        self.maxsize = maxsize
        self.queue: deque[Any] = deque()
        self._signal = threading.Lock()  # held: nothing new to take since a waiter looked
        self._signal.acquire()

    def qsize(self) -> int:
        return len(self.queue)

    def empty(self) -> bool:
        return not self.queue

    def full(self) -> bool:
        return 0 < self.maxsize <= len(self.queue)

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        self.put_nowait(item)  # (the pools never put more than they took out)

    def put_nowait(self, item: Any) -> None:
        if self.full():
            raise queue.Full
        self.queue.append(item)
        self._wake()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                item = self.queue.pop()
            except IndexError:
                pass
            else:
                if self.queue:
                    self._wake()  # more to take: the next waiter need not wait
                return item
            left = _LOOK_AGAIN_SECONDS if deadline is None else deadline - time.monotonic()
            if not block or left <= 0:
                raise queue.Empty
            self._signal.acquire(timeout=min(left, _LOOK_AGAIN_SECONDS))

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def _wake(self) -> None:
        if self._signal.locked():
            try:  # noqa: SIM105 (a plain try: contextlib.suppress would be Python-level code)
                self._signal.release()
            except RuntimeError:  # another thread woke the waiters first
                pass


class guard:
    """Run one call of the library on a sync client: a connection released during it goes
    back to its pool only once the call is over, disconnected first if the call was
    interrupted (anything but the client library's own errors escaped). Re-entrant: an
    inner guard leaves the work to the outer one."""

    __slots__ = ("_held", "_token")

    def __init__(self) -> None:
        self._held: list[tuple[GuardedPool, Any]] = []
        self._token: Any = None

    def __enter__(self) -> guard:
        if _current.get() is None:
            self._token = _current.set(self)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._token is None:
            return  # (an inner guard)
        _current.reset(self._token)
        self._token = None
        stale = exc is not None and not isinstance(exc, backend_errors())
        self._hand_back(disconnect=stale)

    def _hand_back(self, *, disconnect: bool = False) -> None:
        while self._held:
            pool, connection = self._held.pop()
            try:
                if disconnect:
                    connection.disconnect()
            finally:
                pool._drl_release_now(connection)

    def _keep(self, pool: GuardedPool, connection: Any) -> None:
        self._held.append((pool, connection))


_current: ContextVar[guard | None] = ContextVar("drl_guard", default=None)


class GuardedPool:
    """Mixed into a sync connection pool class (before it): releases during a guarded call
    wait for the call's end, and a blocking pool waits on a :class:`SafeLifoQueue` (see the
    module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "queue_class" not in kwargs and _takes_a_queue_class(type(self)):
            kwargs["queue_class"] = SafeLifoQueue
        super().__init__(*args, **kwargs)

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        current = _current.get()
        if current is not None and current._held:
            current._hand_back()  # the call's previous exchange is over
        return super().get_connection(*args, **kwargs)  # type: ignore[misc]

    def release(self, connection: Any) -> None:
        current = _current.get()
        if current is None:
            super().release(connection)  # type: ignore[misc]
        else:
            current._keep(self, connection)

    def _drl_release_now(self, connection: Any) -> None:
        super().release(connection)  # type: ignore[misc]


_guarded: dict[type, type] = {}
_queue_classes: dict[type, bool] = {}


def _takes_a_queue_class(pool_class: type) -> bool:
    """Whether ``pool_class`` (a blocking pool) is made with a ``queue_class``."""
    takes = _queue_classes.get(pool_class)
    if takes is None:
        takes = any(
            "queue_class" in inspect.signature(vars(base)["__init__"]).parameters
            for base in pool_class.__mro__
            if "__init__" in vars(base) and base is not GuardedPool
        )
        _queue_classes[pool_class] = takes
    return takes


def guarded_pool(pool_class: type) -> type:
    """``pool_class`` with :class:`GuardedPool` mixed in (one class per pool class)."""
    if issubclass(pool_class, GuardedPool):
        return pool_class
    made = _guarded.get(pool_class)
    if made is None:
        body = {"__module__": __name__, "__qualname__": pool_class.__qualname__}
        made = _guarded.setdefault(
            pool_class, type(pool_class.__name__, (GuardedPool, pool_class), body)
        )
    return made


def unguarded(pool_class: type) -> type:
    """The pool class :func:`guarded_pool` made ``pool_class`` from (else itself)."""
    if issubclass(pool_class, GuardedPool):
        for base in pool_class.__mro__[1:]:
            if not issubclass(base, GuardedPool):
                return base
    return pool_class

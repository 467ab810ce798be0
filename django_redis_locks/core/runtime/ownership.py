"""Who holds a hold: the thread, greenlet or asyncio task that asked for it.

The rule, for every primitive: a hold belongs to the flow of control that *called*
``acquire()`` / ``aacquire()`` (or entered the ``with`` / ``async with`` block):

- in asyncio code, the running task at the moment ``aacquire()`` is called. asyncio
  wrappers (``wait_for`` on Python 3.11, ``gather``, ``shield``, ``create_task``) run the
  coroutine in a task of their own, but the hold is still the caller's: its ``arelease()``
  works and its hold is renewed while the caller lives. A coroutine made outside any task
  (``asyncio.run(lock.aacquire())``) belongs to the task that runs it;
- in a greenlet that is not its thread's main greenlet (gevent, eventlet, plain greenlet),
  that greenlet, whether or not ``threading`` was monkey-patched, before or after this
  library was imported;
- else the current thread.

An owner is alive while its thread runs, its greenlet is not dead, or its task is not done;
the renewer stops renewing the holds of owners that ended without releasing them.

Background machinery (renewal lanes, the callback thread, wake-up listeners) is made per
*runtime*: per process and per threading implementation, so that code which monkey-patches
``threading`` after importing this library gets machinery built from the patched primitives
(a lock made before the patch, used by greenlets, deadlocks or fails).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import os
import secrets
import sys
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, Literal, ParamSpec, TypeVar

__all__ = [
    "OwnerKind",
    "PerRuntime",
    "bound_to_caller",
    "current_owner",
    "owner_alive",
    "owner_fields",
    "owner_kind",
    "owner_serial",
    "process_tag",
    "runtime_key",
]

OwnerKind = Literal["thread", "greenlet", "task"]
P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
T = TypeVar("T")


#: The running event loop of this thread, or None: asyncio's own look-up that does not raise
#: (sync code asks on every call, and a raised RuntimeError costs more than the answer).
_running_loop: Callable[[], asyncio.AbstractEventLoop | None] = asyncio._get_running_loop


def _current_greenlet() -> Any:
    """The running greenlet if the greenlet module is in use and this is not a thread's main
    greenlet, else None. (``greenlet`` is never imported here: only looked up.)"""
    module = sys.modules.get("greenlet")
    if module is None:
        return None
    current = module.getcurrent()
    return current if current.parent is not None else None


def current_owner() -> Any:
    """The running asyncio task if any, else a non-main greenlet if any, else the thread."""
    if _running_loop() is not None:
        task = asyncio.current_task()
        if task is not None:
            return task
    if "greenlet" in sys.modules:
        greenlet = _current_greenlet()
        if greenlet is not None:
            return greenlet
    return threading.current_thread()


def owner_alive(owner: object) -> bool:
    """Whether ``owner`` (from :func:`current_owner`) is still running."""
    if isinstance(owner, asyncio.Task):
        return not owner.done()
    dead = getattr(owner, "dead", None)  # a greenlet
    if isinstance(dead, bool):
        return not dead
    is_alive = getattr(owner, "is_alive", None)  # a thread, whatever class patching gave it
    return bool(is_alive()) if callable(is_alive) else False


#: Owner -> its serial (see owner_serial); an entry goes when its owner is collected.
_serials: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_next_serial = itertools.count(1).__next__


def process_tag() -> str:
    """A random name of this process, made anew after ``fork()``: unlike its pid, never
    shared with a process on another host or in another container (two containers' first
    processes are both pid 1)."""
    global _tag
    pid = os.getpid()
    if _tag[0] != pid:
        _tag = (pid, secrets.token_hex(6))
    return _tag[1]


_tag: tuple[int, str] = (0, "")


def owner_serial(owner: object) -> int:
    """A number naming ``owner`` (from :func:`current_owner`) for as long as it lives, never
    given to another owner in this process: unlike ``id()``, which an object made later at
    the same address shares once the owner is freed."""
    serial = _serials.get(owner)
    if serial is None:
        serial = _serials[owner] = _next_serial()
    return serial


def owner_kind(owner: object) -> OwnerKind:
    if isinstance(owner, asyncio.Task):
        return "task"
    if isinstance(getattr(owner, "dead", None), bool):
        return "greenlet"
    return "thread"


def owner_fields(owner: object) -> tuple[tuple[str, str], ...]:
    """What holder metadata says of the owner, as (key, value) pairs: the thread, and the task
    or greenlet (made once per owner)."""
    thread = threading.current_thread()
    return _described(thread.name, thread.ident, *_owner_name(owner))


def _owner_name(owner: object) -> tuple[str, str] | tuple[()]:
    """("task", name) or ("greenlet", name) for a task or greenlet; () for a thread."""
    if isinstance(owner, asyncio.Task):
        return ("task", owner.get_name())
    if isinstance(getattr(owner, "dead", None), bool):
        name = getattr(owner, "name", None)
        return ("greenlet", name if isinstance(name, str) else f"greenlet-{id(owner):x}")
    return ()


@functools.lru_cache(maxsize=1024)
def _described(thread_name: str, ident: int | None, *named: str) -> tuple[tuple[str, str], ...]:
    thread = ("thread", f"{thread_name} ({ident})")
    return (thread, (named[0], named[1])) if named else (thread,)


def runtime_key() -> tuple[int, Any, Any]:
    """Changes after ``fork()`` and after ``threading`` is monkey-patched: machinery made
    under another key must be made anew."""
    return (os.getpid(), threading.Lock, threading.get_ident)


class PerRuntime(Generic[T]):
    """One ``factory()`` object per runtime (see :func:`runtime_key`): made on first use,
    and made anew after ``fork()`` or after ``threading`` was monkey-patched."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._current: tuple[tuple[Any, ...], T] | None = None
        self._mutex = threading.Lock()
        os.register_at_fork(after_in_child=self._after_fork)

    def get(self) -> T:
        key = runtime_key()
        current = self._current
        if current is not None and current[0] == key:
            return current[1]
        with self._mutex:
            if self._current is None or self._current[0] != key:
                self._current = (key, self._factory())
            return self._current[1]

    def _after_fork(self) -> None:
        self._mutex = threading.Lock()  # another thread may have held it at fork()


def _caller() -> Any:
    """The owner to bind when an ``a``-method is called: the running task, or None (no
    task: bind to whoever runs the coroutine)."""
    if _running_loop() is None:
        return None
    return asyncio.current_task()


def bound_to_caller(
    method: Callable[Concatenate[S, Any, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """Make an ``a``-method whose owner is the task that *calls* it (see the module doc).

    ``method(self, owner, ...)`` gets that task, or None when it was called outside a task.
    The result is still recognised as a coroutine function (``inspect`` on Python 3.12+,
    ``asyncio.iscoroutinefunction`` and asgiref on every version).
    """

    @functools.wraps(method)
    def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        return method(self, _caller(), *args, **kwargs)

    signature = inspect.signature(method)
    self_parameter, _owner, *rest = signature.parameters.values()
    call.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[self_parameter, *rest]
    )
    _mark_coroutine_function(call)
    return call


def _mark_coroutine_function(function: Callable[..., Any]) -> None:
    mark = getattr(inspect, "markcoroutinefunction", None)
    if mark is not None:  # Python 3.12+
        mark(function)
    else:  # Python 3.11: the marker asyncio.iscoroutinefunction (and asgiref) look for
        function._is_coroutine = asyncio.coroutines._is_coroutine  # type: ignore[attr-defined]

"""Decorated calls do not nest: the (cache alias, lock name) pairs that the decorated calls
running in this context hold, so that a call of a name its caller holds already is told so
(LockAlreadyHeld), not that someone else holds it (locks are not re-entrant).

A context is a thread, greenlet or asyncio task (a :class:`contextvars.ContextVar`), so code
a call runs through ``sync_to_async`` or ``async_to_sync`` shares its caller's. The work a
call's result does after it returned (a streamed response's content, a coroutine a callable
not seen as async returned) is the call's own: each step of it runs :func:`continuing` the
call's hold, wherever it runs.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

from django_redis_locks.core.errors import LockAlreadyHeld
from django_redis_locks.kept import HeldAs, held_as

__all__ = ["HeldAs", "continuing", "ended", "held_as", "holding"]

_held_here: contextvars.ContextVar[frozenset[HeldAs]] = contextvars.ContextVar(
    "django_redis_locks_held_here", default=frozenset()
)


@contextmanager
def holding(held: HeldAs, label: str) -> Iterator[None]:
    """Note that this context's call holds ``held`` while the block runs; raise
    LockAlreadyHeld, without taking anything, if an enclosing call holds it already."""
    here = _held_here.get()
    if held in here:
        raise LockAlreadyHeld(
            f"lock {held[1]!r} is already held by this caller: {label} was called inside a "
            "decorated call that holds the same name, and locks are not re-entrant (give "
            "the inner call another name, or call its undecorated function)"
        )
    token = _held_here.set(here | {held})
    try:
        yield
    finally:
        _held_here.reset(token)


def continuing(held: HeldAs) -> contextvars.Token[frozenset[HeldAs]]:
    """Note that this context runs a step of the later work of the call that holds ``held``;
    give the token back to :func:`ended` when the step is done."""
    return _held_here.set(_held_here.get() | {held})


def ended(token: contextvars.Token[frozenset[HeldAs]]) -> None:
    """The step that :func:`continuing` gave ``token`` for is done."""
    _held_here.reset(token)

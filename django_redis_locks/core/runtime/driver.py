"""Run an operation's steps against Redis: once with a sync client, once with asyncio.

Every public operation is written once, as a generator that yields *effects* (run this script,
wait for a wake-up, ...) and receives their results. :func:`drive` executes the effects with
blocking calls, :func:`adrive` with ``await``: the two API flavours share every decision and
differ only here. Redis errors are turned into :class:`LockBackendError` and thrown back into
the operation, so it can clean up (or remember a token for a retry) before the error leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from django_redis_locks.core.connection.backend import Backend, wait_within
from django_redis_locks.core.connection.libraries import backend_errors
from django_redis_locks.core.errors import LockBackendError
from django_redis_locks.core.protocol.scripting import (
    Call,
    run,
    run_async,
    run_many,
    run_many_async,
)

from .renewal import renewer
from .resends import counting
from .waiters import AsyncWaiter, SyncWaiter

__all__ = [
    "Command",
    "Detach",
    "Eval",
    "EvalMany",
    "EvalWait",
    "Listen",
    "Noted",
    "Operation",
    "Sent",
    "Wait",
    "adrive",
    "drive",
]

logger = logging.getLogger(__name__)
T = TypeVar("T")
_getpid = os.getpid


@dataclass(frozen=True, slots=True)
class Eval:
    """Run one script; result: its reply."""

    call: Call


@dataclass(frozen=True, slots=True)
class EvalMany:
    """Run several scripts in as few round trips as possible; result: their replies.

    Raises the first error among the replies.
    """

    calls: tuple[Call, ...]


@dataclass(frozen=True, slots=True)
class EvalWait:
    """Run one script then ``WAIT replicas timeout_ms`` on the same connection.

    Result: ``(reply, acknowledged_replicas)``.
    """

    call: Call
    replicas: int
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class Noted:
    """Run ``effect`` (an Eval or EvalWait) and note whether its request went out more than
    once (the client library resent it: see :mod:`.resends`); result: :class:`Sent`."""

    effect: Eval | EvalWait


@dataclass(frozen=True, slots=True)
class Sent:
    """What a :class:`Noted` effect came to: its result, and whether it was resent (an
    earlier copy may still reach Redis later)."""

    value: Any
    resent: bool


@dataclass(frozen=True, slots=True)
class Command:
    """Run one plain command on the node serving ``route_key``; result: its reply."""

    args: tuple[Any, ...]
    route_key: str


@dataclass(frozen=True, slots=True)
class Listen:
    """Register for wake-ups of ``member``; result: a waiter (close it when done)."""

    member: str
    ready_timeout: float


@dataclass(frozen=True, slots=True)
class Wait:
    """Block until the waiter is woken or ``timeout`` passes; result: the wake-up's news
    ("" to try now, or a slice's wait; see :mod:`..protocol.wake_messages`) if woken, else None."""

    waiter: SyncWaiter | AsyncWaiter
    timeout: float


@dataclass(frozen=True, slots=True)
class Detach:
    """Clean up after an interruption (a cancellation, Ctrl-C): run a token-checked release
    whatever happens to the caller next. Sync callers run it at once; asyncio callers run it
    in a task shielded from further cancellation and wait for it. Never raises: if Redis
    cannot be reached, the renewer sends it later (for up to ``lifetime`` seconds, how long
    what it undoes could live; ``what`` names it in logs)."""

    call: Call
    lifetime: float
    what: str


Effect = Eval | EvalMany | EvalWait | Noted | Command | Listen | Wait | Detach
Operation = Generator[Effect, Any, T]
#: Effects whose result is an answer from Redis.
_ANSWERED = (Eval, EvalMany, EvalWait, Noted, Command)


def _backend_error(exc: Exception) -> LockBackendError:
    error = LockBackendError(f"Redis failed: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def drive(operation: Operation[T], backend: Backend) -> T:
    """Run ``operation`` to completion with blocking calls."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = operation.send(value) if error is None else operation.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        try:
            value = _execute(effect, backend)
            if backend.checked_in != _getpid() and isinstance(effect, _ANSWERED):
                # The first answer from Redis in this process. Checked before the operation
                # goes on: an interruption here reaches it as one of this effect, so what
                # the effect did (an acquire) is undone, not recorded after the fact.
                backend.check_eviction()
        except backend_errors() as exc:
            error = _backend_error(exc)
        except BaseException as exc:
            error = exc


def _execute(effect: Effect, backend: Backend) -> Any:
    if isinstance(effect, Eval):
        return run(backend.client, effect.call)
    if isinstance(effect, Noted):
        with counting() as count:
            value = _execute(effect.effect, backend)
        return Sent(value, count.resent)
    if isinstance(effect, EvalMany):
        return _all_replies(backend.run_many(effect.calls), effect.calls, backend)
    if isinstance(effect, EvalWait):
        client = backend.node_client(effect.call.keys[0])
        replies = run_many(client, [effect.call], wait=(effect.replicas, _wait_ms(effect, client)))
        return _eval_wait_result(replies)
    if isinstance(effect, Command):
        return backend.command(effect.args, effect.route_key)
    if isinstance(effect, Listen):
        hub = backend.hub()
        waiter = hub.register(effect.member)
        try:
            hub.wait_ready(effect.ready_timeout)
        except BaseException:  # interrupted before the operation got the waiter: unregister
            waiter.close()
            raise
        return waiter
    if isinstance(effect, Wait):
        assert isinstance(effect.waiter, SyncWaiter)
        return effect.waiter.wait(effect.timeout)
    if isinstance(effect, Detach):
        # Inline, not in a thread: a process that exits right after the interruption (a
        # command stopped by Ctrl-C) must not lose the clean-up.
        try:
            run(backend.client, effect.call)
        except backend_errors() as exc:
            _detach_failed(backend, effect, exc)
        return None
    raise TypeError(f"unknown effect {effect!r}")  # pragma: no cover


def _all_replies(replies: list[Any], calls: tuple[Call, ...], backend: Backend) -> list[Any]:
    """The replies, or the first error among them; on a Cluster, a LockBackendError that
    names the slots and nodes whose scripts failed (a listing spans every master)."""
    failed = [index for index, reply in enumerate(replies) if isinstance(reply, BaseException)]
    if not failed:
        return replies
    first = replies[failed[0]]
    if not (backend.cluster and isinstance(first, backend_errors())):
        raise first
    keys = [calls[index].keys[0] for index in failed]
    slots = sorted({int(backend.client.keyslot(key)) for key in keys})
    nodes = sorted({_node_name(backend, key) for key in keys})
    shown = ", ".join(map(str, slots[:_SLOTS_SHOWN])) + (
        ", ..." if len(slots) > _SLOTS_SHOWN else ""
    )
    error = LockBackendError(
        f"Redis failed for {len(failed)} of {len(calls)} scripts, on {len(slots)} slots "
        f"({shown}) served by {', '.join(nodes)}: {type(first).__name__}: {first}"
    )
    raise error from first


def _node_name(backend: Backend, key: str) -> str:
    try:
        return backend.lane_name(key)
    except Exception:  # the slot map may have no node for it right now
        return "no known node"


#: How many failed slots an error message lists.
_SLOTS_SHOWN = 16


def _wait_ms(effect: EvalWait, client: Any) -> int:
    """The WAIT's timeout on ``client``: within its socket timeout (the Backend shortened
    ``replica_wait_timeout`` for the clients it knew of; an asyncio client made later by a
    factory may time out sooner)."""
    seconds = wait_within(effect.timeout_ms / 1000, client)
    return max(1, math.floor(seconds * 1000))


def _eval_wait_result(replies: list[Any]) -> tuple[Any, int]:
    for reply in replies:
        if isinstance(reply, backend_errors()):
            raise reply
    return replies[0], int(replies[1])


async def adrive(operation: Operation[T], backend: Backend) -> T:
    """Run ``operation`` to completion with ``await``.

    A cancellation that reaches the task while an effect runs is delivered to the operation
    even when something below swallowed it: redis-py sends commands through
    ``asyncio.wait_for``, which on Python 3.11 drops a cancellation that arrives as the send
    completes. The task's ``cancelling()`` count still shows it, and it is honoured here.
    """
    task = asyncio.current_task()
    requested = task.cancelling() if task is not None else 0
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = operation.send(value) if error is None else operation.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        try:
            value = await _aexecute(effect, backend)
            if backend.checked_in != _getpid() and isinstance(effect, _ANSWERED):
                await backend.acheck_eviction()  # (see drive)
        except backend_errors() as exc:
            error = _backend_error(exc)
        except BaseException as exc:
            error = exc
        if task is not None and task.cancelling() > requested:
            requested = task.cancelling()  # (delivered once, whether raised or swallowed)
            if error is None:
                error = asyncio.CancelledError()


_background: set[asyncio.Task[Any]] = set()


async def _aexecute(effect: Effect, backend: Backend) -> Any:
    if isinstance(effect, Eval):
        return await run_async(await backend.aclient(), effect.call)
    if isinstance(effect, Noted):
        with counting() as count:
            value = await _aexecute(effect.effect, backend)
        return Sent(value, count.resent)
    if isinstance(effect, EvalMany):
        return _all_replies(await backend.arun_many(effect.calls), effect.calls, backend)
    if isinstance(effect, EvalWait):
        if backend.cluster:  # a WAIT must follow the write on one node connection
            node = backend.node_client(effect.call.keys[0])
            replies = await _finish_in_thread(
                run_many, node, [effect.call], wait=(effect.replicas, _wait_ms(effect, node))
            )
        else:
            aclient = await backend.aclient()
            replies = await run_many_async(
                aclient, [effect.call], wait=(effect.replicas, _wait_ms(effect, aclient))
            )
        return _eval_wait_result(replies)
    if isinstance(effect, Command):
        return await backend.acommand(effect.args, effect.route_key)
    if isinstance(effect, Listen):
        hub = backend.hub()
        awaiter = hub.register_async(effect.member)
        try:
            await hub.await_ready(effect.ready_timeout)
        except BaseException:  # cancelled before the operation got the waiter: unregister
            awaiter.close()
            raise
        return awaiter
    if isinstance(effect, Wait):
        assert isinstance(effect.waiter, AsyncWaiter)
        return await effect.waiter.wait(effect.timeout)
    if isinstance(effect, Detach):
        task = asyncio.get_running_loop().create_task(_adetached(backend, effect))
        _background.add(task)
        task.add_done_callback(_background.discard)
        # Wait for it (the caller's cancellation is delivered afterwards); if the caller is
        # cancelled again meanwhile, the shielded task still completes on its own.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(task)
        return None
    raise TypeError(f"unknown effect {effect!r}")  # pragma: no cover


async def _adetached(backend: Backend, effect: Detach) -> None:
    try:
        await run_async(await backend.aclient(), effect.call)
    except backend_errors() as exc:
        _detach_failed(backend, effect, exc)


def _detach_failed(backend: Backend, effect: Detach, exc: Exception) -> None:
    logger.warning("clean-up of %s failed (%s); retrying in the background", effect.what, exc)
    renewer().reclaim(backend, effect.call, effect.lifetime, effect.what)


async def _finish_in_thread(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``asyncio.to_thread``, but a cancellation is delivered only once the thread finished:
    what the thread did (an acquire, say) is then over, and the caller's clean-up comes
    after it, not before."""
    future = asyncio.ensure_future(asyncio.to_thread(function, *args, **kwargs))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        while not future.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([future])  # (never cancels the future itself)
        raise

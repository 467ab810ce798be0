"""A decorated call's hold kept past the call, for work its result does later.

A view that returns a streamed response (``StreamingHttpResponse``, ``FileResponse``) returns
before its body is produced: the server iterates the response afterwards, then closes it
(WSGI servers must call ``close()``; Django's ASGI handler and test clients do too). The hold
is therefore kept until the stream ends, and released once, by whichever comes first:

- the end of the content's iteration: exhausted, raised, or closed early (a client that went
  away). The content is wrapped as Django's own middleware wraps it, by setting
  ``streaming_content``; the wrapper closes what it wraps before releasing, so a generator's
  own clean-up still runs under the lock;
- ``response.close()``: a closer is added to the response's resource closers, after those
  of its content, for a response that is closed without being iterated (or whose file
  goes to ``wsgi.file_wrapper``: a FileResponse's file is left for it, so sendfile still
  works, and the lock is released when the response is closed).

A coroutine returned by a callable that is not recognised as async (an object with an
``async def __call__``) is kept the same way, until it finishes.

That later work is the call's own: a decorated call of the same name made in it (in a step
of the stream, its clean-up, or the coroutine) is nested, and raises LockAlreadyHeld, as
inside the call (see :mod:`.nesting`).

The release may come from another thread or task than the one that took the lock (Django's
ASGI handler closes responses in a thread; a WSGI server serving an async view consumes its
async iterator in an event loop of its own), so it is made for the hold itself, not for the
current owner. Renewal goes on while the owner that took the lock (the thread, or the asyncio
task, that ran the view) lives, as for any hold.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any, TypeVar

from django.http import StreamingHttpResponse

from django_redis_locks.kept import HeldAs, KeptHold

from .nesting import continuing, ended

__all__ = ["KeptHold", "keep_until_done", "keep_until_streamed"]

T = TypeVar("T")


def keep_until_streamed(response: StreamingHttpResponse, kept: KeptHold) -> StreamingHttpResponse:
    """Keep ``kept`` until ``response`` is streamed or closed (see the module doc)."""
    if getattr(response, "file_to_stream", None) is None:
        content: Any = response._iterator  # type: ignore[attr-defined]
        response.streaming_content = (
            _held_async(content, kept) if response.is_async else _held(content, kept)
        )
    response._resource_closers.append(kept.close)  # type: ignore[attr-defined]
    return response


async def keep_until_done(awaitable: Awaitable[T], kept: KeptHold) -> T:
    """Await ``awaitable``, then release ``kept``."""
    token = continuing(kept.held_as)  # (one task runs all of this coroutine)
    try:
        result = await awaitable
    except BaseException as error:
        ended(token)
        await kept.arelease(error)
        raise
    ended(token)
    await kept.arelease(at_end=True)
    return result


class _Steps:
    """A streamed response's content, each step of which (and its close) runs continuing
    the call's hold, in whichever thread or task runs it."""

    def __init__(self, content: Iterator[Any], held_as: HeldAs) -> None:
        self.content = content
        self.held_as = held_as

    def __iter__(self) -> _Steps:
        return self

    def __next__(self) -> Any:
        token = continuing(self.held_as)
        try:
            return next(self.content)
        finally:
            ended(token)

    def close(self) -> None:
        close = getattr(self.content, "close", None)
        if close is not None:
            token = continuing(self.held_as)
            try:
                close()
            finally:
                ended(token)


def _held(content: Iterator[Any], kept: KeptHold) -> Iterator[Any]:
    try:
        yield from _Steps(content, kept.held_as)  # (closing this closes the content first)
    except GeneratorExit:
        kept.release()
        raise
    except BaseException as error:
        kept.release(error)
        raise
    kept.release(at_end=True)


async def _held_async(content: AsyncIterator[Any], kept: KeptHold) -> AsyncIterator[Any]:
    steps = aiter(content)
    try:
        while True:
            token = continuing(kept.held_as)  # (each step: the consumer may change)
            try:
                part = await anext(steps)
            except StopAsyncIteration:
                break
            finally:
                ended(token)
            yield part
    except GeneratorExit:
        try:
            aclose = getattr(content, "aclose", None)
            if aclose is not None:  # its clean-up runs under the lock, as for a sync one
                token = continuing(kept.held_as)
                try:
                    await aclose()
                finally:
                    ended(token)
        finally:
            await kept.arelease()
        raise
    except BaseException as error:
        await kept.arelease(error)
        raise
    await kept.arelease(at_end=True)

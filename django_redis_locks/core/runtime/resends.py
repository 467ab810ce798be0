"""Whether a request went out more than once: the client library's resends, counted.

redis-py and valkey-py resend a command on a new connection when the old one broke before its
reply came (the Backend's retry policy does, once: see
:meth:`..connection.libraries.ClientLibrary.retry`).
The first copy may still be on its way and reach Redis later than the resend. The policy the
library builds is a :func:`noting` subclass of the client library's ``Retry``: every failure
it retries after is counted in the :func:`counting` block around the call, if any, so the
driver can tell an operation that its request went out more than once (see
:class:`.driver.Noted`).

The count lives in a context variable: a call runs in the caller's thread or task (or a
worker thread or task that copied the caller's context), so concurrent calls never mix their
counts. A client whose retry policy is its own (``bound_retries=False``, custom pools) resends
unnoticed.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
from collections.abc import Iterator
from typing import Any

__all__ = ["Count", "counting", "noting"]


class Count:
    """How many times a request failed and was sent again in a :func:`counting` block."""

    __slots__ = ("failures",)

    def __init__(self) -> None:
        self.failures = 0

    @property
    def resent(self) -> bool:
        return self.failures > 0


_count: contextvars.ContextVar[Count | None] = contextvars.ContextVar("drl_resends", default=None)


@contextlib.contextmanager
def counting() -> Iterator[Count]:
    """Count the resends of the calls made inside the block (in this context)."""
    count = Count()
    reset = _count.set(count)
    try:
        yield count
    finally:
        _count.reset(reset)


def _note() -> None:
    count = _count.get()
    if count is not None:
        count.failures += 1


def noting(retry_class: Any) -> Any:
    """A subclass of a client library's ``Retry`` (sync, or asyncio: its ``call_with_retry``
    is a coroutine function) that counts each failure it hands to its ``fail`` callback,
    that is each time the request may be sent again."""
    if inspect.iscoroutinefunction(retry_class.call_with_retry):

        class AsyncNoting(retry_class):  # type: ignore[misc]
            async def call_with_retry(self, do: Any, fail: Any, *args: Any, **kwargs: Any) -> Any:
                async def noted(*failure: Any) -> Any:
                    _note()
                    return await fail(*failure)

                return await super().call_with_retry(do, noted, *args, **kwargs)

        AsyncNoting.__name__ = AsyncNoting.__qualname__ = f"Noting{retry_class.__name__}"
        return AsyncNoting

    class Noting(retry_class):  # type: ignore[misc]
        def call_with_retry(self, do: Any, fail: Any, *args: Any, **kwargs: Any) -> Any:
            def noted(*failure: Any) -> Any:
                _note()
                return fail(*failure)

            return super().call_with_retry(do, noted, *args, **kwargs)

    Noting.__name__ = Noting.__qualname__ = f"Noting{retry_class.__name__}"
    return Noting

"""``@redis_lock``: run a function, view or task under a lock named from its arguments.

::

    @redis_lock("order:{order_id}", timeout=30)
    def charge(request, order_id): ...

The key is a ``str.format`` template filled from the call's bound arguments (attribute and
index access work: ``"report:{request.user.pk}"``), or a callable returning the name. Each
value is percent-encoded, so a value can never add a separator, reach another name's keys or
leave the namespace, and long values are replaced by a digest, so names stay bounded.

Each call takes its own Lock (its own token), sync or async like the decorated function.
On contention: ``"raise"`` (LockNotAcquired), ``"skip"`` (return ``skip_result``, None by
default, without running), ``"retry"`` (a Celery or Django task runs again later) or a
callable ``on_contention(error, *args, **kwargs)`` whose result is returned. A view (called
with an ``HttpRequest``) answers contention with ``VIEW_CONTENTION_STATUS`` (409 Conflict)
and ``Retry-After`` instead. Redis errors fail closed (LockBackendError, or
``VIEW_REDIS_ERROR_STATUS`` 503 for views) unless the policy is ``"fail_open"``; both log.

The body never runs without the lock otherwise: a call whose arguments cannot name it raises
(see :mod:`.names`), and a streamed response keeps it until it has been sent (see
:mod:`.kept_holds`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Final, Generic, Literal, ParamSpec, Protocol, TypeVar, overload

from asgiref.sync import iscoroutinefunction
from django.conf import settings

from django_redis_locks.core.errors import InvalidArgument, InvalidArgumentType
from django_redis_locks.core.lock import Replicas, _check_replicas
from django_redis_locks.core.validation import check_bool, check_metric_name, check_ttl, check_wait
from django_redis_locks.transactions import check_database, check_renewed

from .callers import label_of, refuse_generators, refuse_task_objects
from .calls import Guard, OnContention, OnLost, OnRedisError
from .names import Namer, signatures_of

__all__ = ["SKIPPED", "redis_lock"]

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
S_co = TypeVar("S_co", covariant=True)

#: A ``skip_result`` for tasks: a plain string (task results must serialise as JSON) that no
#: real run returns, so ``result == SKIPPED`` tells a run skipped for the lock from one that ran.
SKIPPED: Final = "django_redis_locks:skipped"


class _Keeping(Protocol):
    """A decorator whose calls return what the function returns (``"raise"``)."""

    def __call__(self, func: F, /) -> F: ...


class _Skipping(Protocol, Generic[S_co]):
    """A decorator whose calls may not run the function, and then return ``S_co``."""

    @overload
    def __call__(
        self, func: Callable[P, Coroutine[Any, Any, R]], /
    ) -> Callable[P, Coroutine[Any, Any, R | S_co]]: ...

    @overload
    def __call__(self, func: Callable[P, R], /) -> Callable[P, R | S_co]: ...


@overload
def redis_lock(
    key: str | Callable[..., str],
    *,
    timeout: float | None = None,
    blocking: bool = False,
    blocking_timeout: float | None = None,
    on_contention: Literal["raise"] = "raise",
    auto_renew: bool = True,
    using: str | None = None,
    wait_for_replicas: Replicas | None = None,
    on_redis_error: OnRedisError | None = None,
    retry_after: float | None = None,
    on_lost: OnLost | None = None,
    metric_name: str | None = None,
    release_on_commit: bool = False,
    database: str | None = None,
) -> _Keeping: ...


@overload
def redis_lock(
    key: str | Callable[..., str],
    *,
    timeout: float | None = None,
    blocking: bool = False,
    blocking_timeout: float | None = None,
    on_contention: Literal["skip", "retry"],
    skip_result: None = None,
    auto_renew: bool = True,
    using: str | None = None,
    wait_for_replicas: Replicas | None = None,
    on_redis_error: OnRedisError | None = None,
    retry_after: float | None = None,
    on_lost: OnLost | None = None,
    metric_name: str | None = None,
    release_on_commit: bool = False,
    database: str | None = None,
) -> _Skipping[None]: ...


@overload
def redis_lock(
    key: str | Callable[..., str],
    *,
    timeout: float | None = None,
    blocking: bool = False,
    blocking_timeout: float | None = None,
    on_contention: Literal["skip", "retry"],
    skip_result: S,
    auto_renew: bool = True,
    using: str | None = None,
    wait_for_replicas: Replicas | None = None,
    on_redis_error: OnRedisError | None = None,
    retry_after: float | None = None,
    on_lost: OnLost | None = None,
    metric_name: str | None = None,
    release_on_commit: bool = False,
    database: str | None = None,
) -> _Skipping[S]: ...


@overload
def redis_lock(
    key: str | Callable[..., str],
    *,
    timeout: float | None = None,
    blocking: bool = False,
    blocking_timeout: float | None = None,
    on_contention: Callable[..., Any],
    auto_renew: bool = True,
    using: str | None = None,
    wait_for_replicas: Replicas | None = None,
    on_redis_error: OnRedisError | None = None,
    retry_after: float | None = None,
    on_lost: OnLost | None = None,
    metric_name: str | None = None,
    release_on_commit: bool = False,
    database: str | None = None,
) -> _Skipping[Any]: ...


def redis_lock(
    key: str | Callable[..., str],
    *,
    timeout: float | None = None,
    blocking: bool = False,
    blocking_timeout: float | None = None,
    on_contention: OnContention = "raise",
    skip_result: Any = None,
    auto_renew: bool = True,
    using: str | None = None,
    wait_for_replicas: Replicas | None = None,
    on_redis_error: OnRedisError | None = None,
    retry_after: float | None = None,
    on_lost: OnLost | None = None,
    metric_name: str | None = None,
    release_on_commit: bool = False,
    database: str | None = None,
) -> Any:
    """Decorate a function so that each call runs holding the lock named by ``key``.

    ``timeout`` is the lock's TTL (default: the ``DEFAULT_TIMEOUT`` setting); with
    ``auto_renew`` (the default) it is renewed while the call runs, so it only bounds how long
    a crashed caller blocks the name. ``blocking`` waits for the lock (up to
    ``blocking_timeout`` seconds) instead of giving up at once. ``on_contention`` says what a
    call that cannot have the lock does: ``"raise"`` LockNotAcquired, ``"skip"`` return
    ``skip_result`` without running, ``"retry"`` run again later (a Celery task: its
    ``retry()``; a Django task with ``takes_context=True``: enqueued again; then it returns
    ``skip_result``), or a callable. ``on_redis_error`` overrides the ``ON_REDIS_ERROR``
    setting. ``retry_after`` fixes the seconds a contended call asks to wait (a view's
    ``Retry-After``, a retry's countdown); None (the default) takes the lock's estimate, at most
    the ``RETRY_AFTER_MAX`` setting. ``on_lost`` says what a call whose hold was lost while it
    ran (it expired unrenewed, or was force-released) does when it returns: ``"raise"``
    LockLost, or ``"return"`` its result (the loss is logged at ERROR); default: a view's
    ``VIEW_ON_LOCK_LOST`` setting ("return"), ``"raise"`` for anything else.
    ``release_on_commit`` keeps the hold, when the call returns or raises inside
    ``transaction.atomic()``, until that transaction commits or rolls back (at once outside
    one), renewed meanwhile; ``database`` (default ``"default"``) names the connection whose
    transaction it follows. In the same transaction, a later call of the same name runs under
    that hold (see :mod:`django_redis_locks.transactions`). Sync functions only: an async
    function runs outside any transaction.
    ``metric_name`` is the name the lock's events carry to aggregate by (default: the key
    template, ``"order:{order_id}"``; for a callable key, the function's label), never the
    call's own lock name. The other arguments are those of :class:`Lock`.

    Raises TypeError / ValueError (InvalidArgumentType / InvalidArgument) at decoration time
    for bad arguments, a template field that names no parameter, a generator function, or a
    task object (put ``@task`` / ``@shared_task`` above ``@redis_lock``); and at call time,
    without running the call, when its arguments cannot name the lock.
    """
    if isinstance(key, str):
        if not key:
            raise InvalidArgument("key", "must not be empty")
    elif not callable(key):
        raise InvalidArgumentType("key", f"must be a str template or a callable, not {key!r}")
    options = {
        "timeout": None if timeout is None else check_ttl(timeout, "timeout"),
        "blocking": check_bool(blocking, "blocking"),
        "blocking_timeout": check_wait(blocking_timeout),
        "auto_renew": check_bool(auto_renew, "auto_renew"),
        "using": using,
        "wait_for_replicas": _check_replicas(wait_for_replicas),
        "metric_name": check_metric_name(metric_name),
    }
    if using is not None and not isinstance(using, str):
        raise InvalidArgumentType("using", f"must be a str or None, not {type(using).__name__}")
    if not (on_contention in ("raise", "skip", "retry") or callable(on_contention)):
        raise InvalidArgument(
            "on_contention",
            f"must be 'raise', 'skip', 'retry' or a callable, not {on_contention!r}",
        )
    if skip_result is not None and on_contention not in ("skip", "retry"):
        raise InvalidArgument(
            "skip_result",
            "is what a skipped call returns: it needs on_contention='skip' or 'retry'",
        )
    if retry_after is not None:
        retry_after = check_ttl(retry_after, "retry_after")
    if on_lost not in (None, "raise", "return"):
        raise InvalidArgument("on_lost", f"must be 'raise', 'return' or None, not {on_lost!r}")
    if on_redis_error not in (None, "fail_closed", "fail_open"):
        raise InvalidArgument(
            "on_redis_error", f"must be 'fail_closed', 'fail_open' or None, not {on_redis_error!r}"
        )

    release_on_commit = check_bool(release_on_commit, "release_on_commit")
    if release_on_commit:
        check_renewed(auto_renew, "auto_renew")
        database = check_database(database, known=settings.configured)
    elif database is not None:
        raise InvalidArgument(
            "database", "names the transaction a hold follows: it needs release_on_commit=True"
        )

    def decorate(func: Any) -> Any:
        refuse_task_objects(func)
        if not callable(func):
            raise InvalidArgumentType("func", f"@redis_lock decorates callables, not {func!r}")
        refuse_generators(func)
        if release_on_commit and iscoroutinefunction(func):
            raise InvalidArgument(
                "release_on_commit",
                "needs a sync function: an async one runs outside any transaction (Django's "
                "atomic() is sync only); decorate the sync function that runs in atomic()",
            )
        namer = Namer(key, signatures_of(func), label_of(func))
        guard = Guard(
            func,
            namer,
            options,
            on_contention,
            skip_result=skip_result,
            on_redis_error=on_redis_error,
            retry_after=retry_after,
            on_lost=on_lost,
            database=database,
        )
        # asgiref's test, as Django's handlers use: it also knows functions marked with
        # markcoroutinefunction (an async class view's as_view() on Python 3.11).
        if iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                return await guard.acall(args, kwargs)

            return async_wrapper

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return guard.call(args, kwargs)

        return wrapper

    return decorate

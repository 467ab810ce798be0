"""One call of a ``@redis_lock``-decorated function: its lock, and the policies on contention
and on Redis errors (see :mod:`.decorator` for what each policy does).

The body never runs without the lock (unless the ``fail_open`` policy says so): a call whose
lock cannot be named raises before it (see :mod:`.names`), and a result that does its
work later, a streamed response or a coroutine, keeps the hold until that work is done (see
:mod:`.kept_holds`)."""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from json.encoder import encode_basestring
from typing import Any, Literal

from django.http import StreamingHttpResponse

from django_redis_locks.conf import OnLost, OnRedisError, get_config
from django_redis_locks.core.errors import (
    LockBackendError,
    LockLost,
    LockNotAcquired,
    LockNotReplicated,
)
from django_redis_locks.core.lock import Lock
from django_redis_locks.transactions import hand_over, in_transaction, waiting_hold

from .callers import (
    label_of,
    load_user,
    refuse_retry_outside_tasks,
    request_of,
    response,
    retry_after_seconds,
    retry_later,
    task_fields,
)
from .kept_holds import KeptHold, keep_until_done, keep_until_streamed
from .names import Namer
from .nesting import held_as, holding

__all__ = ["Guard", "OnContention", "OnLost", "OnRedisError"]

logger = logging.getLogger("django_redis_locks.decorators")

OnContention = Literal["raise", "skip", "retry"] | Callable[..., Any]


class Guard:
    """Runs one decorated call: name, lock, policies."""

    def __init__(
        self,
        func: Callable[..., Any],
        namer: Namer,
        options: dict[str, Any],
        on_contention: OnContention,
        *,
        skip_result: Any,
        on_redis_error: OnRedisError | None,
        retry_after: float | None = None,
        on_lost: OnLost | None = None,
        database: str | None = None,
    ) -> None:
        self.func = func
        self.namer = namer
        self.options = options
        self.on_contention = on_contention
        self.skip_result = skip_result
        self.on_redis_error = on_redis_error
        self.retry_after = retry_after
        self.on_lost = on_lost
        self.database = database  # release_on_commit: the transaction's connection
        self.label = label_of(func)
        # Made (and its options checked) once; each call gets a copy for its name.
        self.template = Lock("decorated", metadata={"label": self.label}, **options)
        if self.template.metric_name is None:  # bounded: the template, not the call's name
            key = namer.key
            self.template.metric_name = key if isinstance(key, str) else self.label
        # The label, led by "renew" when the hold is renewed (the template's own metadata).
        self.label_json = self.template._metadata_json

    def _lock(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Lock:
        """The call's lock. Raises InvalidArgumentType / InvalidArgument when the call's
        arguments cannot name it: the call is then not run."""
        name = self.namer.name(args, kwargs)
        request = request_of(args)
        if request is None:
            task = task_fields(args)
            if not task:
                return self.template._derived(name, {"label": self.label}, self.label_json)
            return self.template._derived(
                name,
                {"label": self.label, **task},
                ",".join(
                    [self.label_json]
                    + [f"{encode_basestring(k)}:{encode_basestring(v)}" for k, v in task.items()]
                ),
            )
        shown = f"{request.method} {request.path}"[:200]
        return self.template._derived(
            name,
            {"label": self.label, "request": shown},
            f'{self.label_json},"request":{encode_basestring(shown)}',
        )

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.on_contention == "retry":
            refuse_retry_outside_tasks(args, self.label)
        lock = self._lock(args, kwargs)
        with holding(held_as(self.options["using"], lock.name), self.label):
            return self._call(lock, args, kwargs)

    def _call(self, lock: Lock, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.database is not None and in_transaction(self.database):  # (or refuses)
            try:
                waiting = waiting_hold(self.options["using"], lock.name, self.database)
            except LockBackendError as error:
                return self._redis_failed(error, lock, args, kwargs)
            if waiting is not None:
                return self.func(*args, **kwargs)  # under the hold its transaction keeps
        try:
            lock.__enter__()
        except (LockBackendError, LockNotReplicated) as error:
            return self._redis_failed(error, lock, args, kwargs)
        except LockNotAcquired as error:
            return self._contended(error, lock, args, kwargs)
        try:
            result = self.func(*args, **kwargs)
        except BaseException:
            # (what the call wrote before it raised is in the transaction all the same)
            if not self._handed_over(lock):
                lock.__exit__(*sys.exc_info())
            raise
        if isinstance(result, StreamingHttpResponse) or inspect.iscoroutine(result):
            return self._keep(lock, result)
        if self._handed_over(lock):
            return result
        with self._releasing(lock, args):
            lock.release()
        return result

    async def acall(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.on_contention == "retry":
            refuse_retry_outside_tasks(args, self.label)
        if self.namer.reads_user:
            await load_user(request_of(args))
        lock = self._lock(args, kwargs)
        with holding(held_as(self.options["using"], lock.name), self.label):
            return await self._acall(lock, args, kwargs)

    async def _acall(self, lock: Lock, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            await lock.__aenter__()
        except (LockBackendError, LockNotReplicated) as error:
            if self._policy() == "fail_open":
                self._log_redis_error(error, lock, opened=True)
                return await self.func(*args, **kwargs)
            return self._redis_failed(error, lock, args, kwargs)
        except LockNotAcquired as error:
            result = self._contended(error, lock, args, kwargs)
            return await result if inspect.isawaitable(result) else result
        try:
            result = await self.func(*args, **kwargs)
        except BaseException:
            await lock.__aexit__(*sys.exc_info())
            raise
        if isinstance(result, StreamingHttpResponse):
            return self._keep(lock, result)
        with self._releasing(lock, args):
            await lock.arelease()
        return result

    def _keep(self, lock: Lock, result: Any) -> Any:
        """Keep the call's hold until ``result`` (a streamed response, or a coroutine that a
        callable not seen as async returned) has done its work."""
        hold = lock._current_hold()
        if hold is None:  # (nothing to keep: release as usual, which says why)
            self._release(lock, lock.release)
            return result
        kept = KeptHold(lock, hold, self.label, held_as(self.options["using"], lock.name))
        if isinstance(result, StreamingHttpResponse):
            return keep_until_streamed(result, kept)
        return keep_until_done(result, kept)

    def _handed_over(self, lock: Lock) -> bool:
        """With ``release_on_commit``, inside a transaction: hand the call's hold to it (see
        :mod:`django_redis_locks.transactions`). False: release it as usual."""
        if self.database is None or not in_transaction(self.database):
            return False
        hold = lock._current_hold()
        if hold is None:  # (nothing to keep: release as usual, which says why)
            return False
        kept = KeptHold(lock, hold, self.label, held_as(self.options["using"], lock.name))
        hand_over(kept, self.database)
        return True

    def _release(self, lock: Lock, release: Callable[[], None]) -> None:
        try:
            release()
        except LockBackendError as error:
            self._release_failed(lock, error)

    @contextmanager
    def _releasing(self, lock: Lock, args: tuple[Any, ...]) -> Iterator[None]:
        """Around the release after the call returned: a failed release only logs (the lock
        expires by its TTL; the call's result stands); a hold lost while the call ran raises
        LockLost, or under the "return" policy is logged and the result stands."""
        try:
            yield
        except LockBackendError as error:
            self._release_failed(lock, error)
        except LockLost as error:
            if self._lost_policy(args) == "raise":
                raise
            self._log_lost(lock, error)

    def _lost_policy(self, args: tuple[Any, ...]) -> OnLost:
        """What a call whose hold was lost while it ran does: ``on_lost``, else a view's
        ``VIEW_ON_LOCK_LOST`` setting, else "raise"."""
        if self.on_lost is not None:
            return self.on_lost
        return get_config().view_on_lock_lost if request_of(args) is not None else "raise"

    def _log_lost(self, lock: Lock, error: LockLost) -> None:
        logger.error(
            "lost: lock %r was lost while %s ran, which went on without mutual exclusion (%s); "
            "its result is returned (on_lost='return')",
            lock.name,
            self.label,
            error,
        )

    def _release_failed(self, lock: Lock, error: LockBackendError) -> None:
        # The call is done; the lock expires by its TTL. Its result stands.
        logger.warning("release: lock %r after %s failed: %s", lock.name, self.label, error)

    def _policy(self) -> OnRedisError:
        return self.on_redis_error or get_config().on_redis_error

    def _log_redis_error(self, error: Exception, lock: Lock, *, opened: bool) -> None:
        if opened:
            logger.warning(
                "acquire: lock %r for %s failed (%s); running without it (fail_open)",
                lock.name,
                self.label,
                error,
            )
        else:
            logger.error(
                "acquire: lock %r for %s failed (%s); not running (fail_closed)",
                lock.name,
                self.label,
                error,
            )

    def _redis_failed(
        self, error: Exception, lock: Lock, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if self._policy() == "fail_open":
            self._log_redis_error(error, lock, opened=True)
            return self.func(*args, **kwargs)
        self._log_redis_error(error, lock, opened=False)
        request = request_of(args)
        if request is not None:
            return response(
                request,
                get_config().view_redis_error_status,
                "unavailable",
                "The lock service is unavailable. Please retry later.",
                retry_after=1,
            )
        raise error

    def _contended(
        self, error: LockNotAcquired, lock: Lock, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        logger.info("acquire: lock %r for %s is taken: already running", lock.name, self.label)
        if callable(self.on_contention):
            return self.on_contention(error, *args, **kwargs)
        retry_after = retry_after_seconds(error, self.retry_after)
        request = request_of(args)
        if request is not None:
            return response(
                request,
                get_config().view_contention_status,
                "locked",
                "This resource is busy: another request holds its lock. Please retry later.",
                retry_after=retry_after,
            )
        if self.on_contention == "skip":
            return self.skip_result
        if self.on_contention == "retry":
            return retry_later(
                error,
                args,
                kwargs,
                name=lock.name,
                label=self.label,
                skip_result=self.skip_result,
                retry_after=retry_after,
            )
        raise error

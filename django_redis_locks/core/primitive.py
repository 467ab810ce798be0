"""What locks and semaphores share: the options, the public API (sync and asyncio) and the
acquire.

A primitive is held by *owners* (threads, greenlets or asyncio tasks; see
:mod:`.runtime.ownership`), each with its own token, so one object may be shared without one
owner releasing another's hold. Every operation is written once as a generator of effects (see
:mod:`.runtime.driver`); the sync methods run it with :func:`drive`, their ``a``-prefixed twins
with :func:`adrive`. The acquire loop lives in :mod:`.runtime.acquiring`; the per-owner holds,
their release and checks in :mod:`.holding` (the base class); a hold's states in
:mod:`.runtime.holds`, renewal in :mod:`.runtime.renewal`. Subclasses supply the scripts.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any, ClassVar, Literal, Self, TypeVar

from .connection.backend import Backend, backend_for_client, resolve_backend
from .errors import (
    InvalidArgument,
    InvalidArgumentType,
    LockBackendError,
    LockNotAcquired,
    LockNotOwned,
)
from .holding import Holding, LostCallback
from .protocol import replies
from .protocol.holder import check_metadata, holder_metadata, metadata_json, new_token
from .runtime.acquiring import Keys, Outcome, Request, acquire_steps
from .runtime.driver import Operation, adrive, drive
from .runtime.holds import HoldTable
from .runtime.ownership import bound_to_caller, current_owner
from .validation import check_bool, check_metric_name, check_name, check_ttl, check_wait

__all__ = ["Primitive"]

K = TypeVar("K", bound=Keys)  # the primitive's keys (LockKeys, SemaphoreKeys)


class Primitive(Holding[K]):
    """Base of :class:`Lock` and :class:`Semaphore`; see their docs for the public API.

    Subclasses set ``kind`` and ``recheck_seconds`` and implement the ``_``-prefixed hooks
    below that raise NotImplementedError.
    """

    #: Word used in messages and in the registry ("lock", "semaphore").
    kind: ClassVar[Literal["lock", "semaphore"]]
    #: Longest a blocked waiter sleeps between attempts when no release wakes it: a lost
    #: notification costs at most this much latency.
    recheck_seconds: ClassVar[float] = 1.0

    def __init__(
        self,
        name: str,
        *,
        timeout: float | None,
        using: str | None,
        client: Any,
        blocking: bool,
        blocking_timeout: float | None,
        auto_renew: bool,
        metadata: Mapping[str, Any] | None,
        on_lost: LostCallback | None,
        metric_name: str | None = None,
    ) -> None:
        self.name = check_name(name)
        self.timeout = None if timeout is None else check_ttl(timeout, "timeout")
        if using is not None and not isinstance(using, str):
            raise InvalidArgumentType("using", f"must be a str or None, not {type(using).__name__}")
        if using is not None and client is not None:
            raise InvalidArgument("using", "give either using= or client=, not both")
        self.using = using
        self.blocking = check_bool(blocking, "blocking")
        self.blocking_timeout = check_wait(blocking_timeout)
        self.auto_renew = check_bool(auto_renew, "auto_renew")
        self.metadata = check_metadata(metadata)
        self._metadata_json = metadata_json(self.metadata)
        if on_lost is not None and not callable(on_lost):
            raise InvalidArgumentType("on_lost", "must be callable or None")
        self.on_lost = on_lost
        self.metric_name = check_metric_name(metric_name)
        self._backend: Backend | None = None
        if client is not None:
            self._backend = client if isinstance(client, Backend) else backend_for_client(client)
        self._holds = HoldTable()
        self._keys: tuple[str, K] | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    def _derived(self, name: str, metadata: dict[str, Any], metadata_json: str) -> Self:
        """A new object with this one's options for ``name`` and ``metadata`` (both checked
        already; ``metadata_json`` as :func:`.protocol.holder.metadata_json` gives it): what the
        decorator makes per call, without checking the same options again."""
        derived = object.__new__(type(self))
        derived.__dict__.update(self.__dict__)
        derived.name = name
        derived.metadata = metadata
        derived._metadata_json = metadata_json
        derived._holds = HoldTable()
        derived._keys = None
        return derived

    # -- hooks for subclasses --------------------------------------------------------------
    def _make_keys(self, backend: Backend) -> K:
        raise NotImplementedError

    def _attempt(
        self, request: Request[Any], queue: bool
    ) -> Operation[replies.Acquired | replies.Contended | replies.TooLate | replies.Evicted]:
        """One try (its script with a deadline, through :meth:`.runtime.acquiring.Request.ask`, and
        the reply's server time to :meth:`.runtime.acquiring.Request.answered`). With ``queue`` a
        primitive with a queue keeps (or takes) a place in it."""
        raise NotImplementedError

    def _not_acquired(self, outcome: Outcome) -> LockNotAcquired:
        raise NotImplementedError

    # -- public API: sync ------------------------------------------------------------------
    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Take it; True if taken, False if not available and waiting ended.

        ``blocking`` (default: the object's) waits for a release, up to ``timeout`` seconds
        (default: the object's ``blocking_timeout``; None waits as long as it takes).
        Raises LockAlreadyHeld if this thread/greenlet/task holds it already, LockBackendError
        when Redis fails (an acquire that may have reached Redis is undone in the background).
        """
        backend = self.backend
        operation = self._acquire(backend, current_owner(), blocking, timeout)
        return drive(operation, backend).acquired

    def release(self) -> None:
        """Release this thread's/greenlet's/task's hold.

        Raises LockNotOwned if it holds nothing, LockLost if the hold had expired, been taken
        over or force-released (Redis is left untouched then), LockBackendError when Redis
        fails (the release is retried in the background, and may be retried by calling again).
        """
        hold = self._require_hold(current_owner())
        drive(self._release(hold), hold.backend)

    def ensure_held(self) -> float:
        """Return the seconds left on this owner's hold; raise LockLost if it is gone.

        Raises LockNotOwned if nothing was acquired, LockBackendError if Redis cannot tell
        (but LockLost if, in addition, the hold's TTL has run out locally).
        """
        hold = self._require_hold(current_owner())
        return drive(self._ensure(hold), hold.backend)

    def __enter__(self) -> Self:
        backend = self.backend
        outcome = drive(self._acquire(backend, current_owner(), None, None), backend)
        if not outcome.acquired:
            raise self._not_acquired(outcome)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        owner = current_owner()
        try:
            hold = self._require_hold(owner)
            drive(self._release(hold), hold.backend)
        except (LockNotOwned, LockBackendError) as error:
            self._release_failed_on_exit(owner, error, exc)

    # -- public API: asyncio (each bound to the task that calls it; see .ownership) ----------
    @bound_to_caller
    async def aacquire(
        self, owner: Any, blocking: bool | None = None, timeout: float | None = None
    ) -> bool:
        """Asyncio twin of :meth:`acquire`. The hold belongs to the task that calls this,
        also when the coroutine runs in a task of its own (``wait_for``, ``gather``,
        ``shield``)."""
        backend = self.backend
        operation = self._acquire(backend, owner or current_owner(), blocking, timeout)
        return (await adrive(operation, backend)).acquired

    @bound_to_caller
    async def arelease(self, owner: Any) -> None:
        """Asyncio twin of :meth:`release`."""
        hold = self._require_hold(owner or current_owner())
        await adrive(self._release(hold), hold.backend)

    @bound_to_caller
    async def aensure_held(self, owner: Any) -> float:
        """Asyncio twin of :meth:`ensure_held`."""
        hold = self._require_hold(owner or current_owner())
        return await adrive(self._ensure(hold), hold.backend)

    async def __aenter__(self) -> Self:
        backend = self.backend
        outcome = await adrive(self._acquire(backend, current_owner(), None, None), backend)
        if not outcome.acquired:
            raise self._not_acquired(outcome)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        owner = current_owner()
        try:
            hold = self._require_hold(owner)
            await adrive(self._release(hold), hold.backend)
        except (LockNotOwned, LockBackendError) as error:
            self._release_failed_on_exit(owner, error, exc)

    # -- plumbing --------------------------------------------------------------------------
    @property
    def backend(self) -> Backend:
        """The Backend this object talks to (the ``using`` alias is resolved on each call)."""
        return self._backend if self._backend is not None else resolve_backend(self.using)

    @property
    def holder_id(self) -> str | None:
        """The public id of this owner's hold, as listings show it (None: not held).

        Safe to log and to show: it identifies the hold without revealing its token.
        """
        hold = self._current_hold(current_owner())
        return None if hold is None else hold.holder_id

    def _keys_for(self, backend: Backend) -> K:
        cached = self._keys
        if cached is None or cached[0] != backend.keys.namespace:
            cached = self._keys = (backend.keys.namespace, self._make_keys(backend))
        return cached[1]

    # -- operations (sans I/O) -------------------------------------------------------------
    def _acquire(
        self, backend: Backend, owner: Any, blocking: bool | None, timeout: float | None
    ) -> Operation[Outcome]:
        blocking = self.blocking if blocking is None else check_bool(blocking, "blocking")
        if timeout is not None and not blocking:
            raise InvalidArgument("timeout", "cannot be given with blocking=False")
        wait = check_wait(timeout, "timeout") if timeout is not None else self.blocking_timeout
        existing = self._current_hold(owner)
        if existing is not None:
            yield from self._retire(existing, owner)
        request = Request(
            backend=backend,
            keys=self._keys_for(backend),
            owner=owner,
            token=new_token(),
            ttl=self.timeout if self.timeout is not None else backend.default_timeout,
            metadata=holder_metadata(owner, self._metadata_json),
        )
        return (yield from acquire_steps(self, request, blocking, wait))

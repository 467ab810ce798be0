"""Helpers for testing code that uses django-redis-locks, against a real Redis.

Locks only mean something on a real Redis (a local-memory cache holds nothing across
processes, and its ``clear()`` would not release anything): point the lock alias at a Redis
server in the test settings, and give each test a namespace of its own, so tests never see
each other's locks and need no clean-up.

- :func:`isolated_locks`: a namespace of its own for a block, a test (as a decorator) or a
  ``TestCase`` class (as a class decorator or the :class:`IsolatedLocksMixin`).
- :func:`hold`: hold a name from the test (on a thread of its own) to drive the code under
  test into its contention branch: the 409 of a view, a skipped task, a wait.
- :func:`capture_holds`: record which locks and semaphores the code took, to assert that
  something ran under a given lock.

With pytest, ``pytest_plugins = ["django_redis_locks.testing"]`` in a ``conftest.py`` adds the
fixtures ``locks_namespace`` (each test isolated) and ``hold_lock`` (``hold`` as a fixture).
docs/testing.md shows both styles.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from django.conf import settings
from django.test.utils import TestContextDecorator, override_settings

from .conf import SETTING_NAME
from .core.errors import LockError
from .core.events import Event, subscribe, unsubscribe
from .core.lock import Lock
from .core.semaphore import Semaphore

__all__ = [
    "CapturedHolds",
    "Holding",
    "IsolatedLocksMixin",
    "capture_holds",
    "hold",
    "isolated_locks",
]

T = TypeVar("T")
Kind = Literal["lock", "semaphore"]


class _IsolatedLocks(override_settings):
    """``override_settings`` of the lock setting's NAMESPACE alone, read when it takes effect
    (a block's start, each test's start), so that what else the setting says then (a
    class-level ``override_settings``, a fixture) is kept."""

    def __init__(self, namespace: str | None) -> None:
        super().__init__()
        self._namespace = namespace

    def enable(self) -> None:
        config = dict(getattr(settings, SETTING_NAME, {}))
        config["NAMESPACE"] = self._namespace or f"test-{secrets.token_hex(4)}"
        self.options = {SETTING_NAME: config}
        super().enable()

    def decorate_class(self, cls: type) -> type:
        # Each test's setUp enables it (after setUpClass applied the class's own settings),
        # instead of override_settings' options fixed when the class is decorated.
        return TestContextDecorator.decorate_class(self, cls)


def isolated_locks(namespace: str | None = None) -> override_settings:
    """Use a namespace of its own (random unless given; a new one each time it takes effect)
    for the locks of a block, a test function or a ``TestCase`` class: ``with
    isolated_locks():``, ``@isolated_locks()``. The rest of the ``DJANGO_REDIS_LOCKS``
    setting is read when the block or each test starts, so a class-level
    ``override_settings`` of it is kept."""
    return _IsolatedLocks(namespace)


class IsolatedLocksMixin:
    """For Django's ``TestCase`` classes: each test runs with a namespace of its own."""

    def setUp(self) -> None:
        isolation = isolated_locks()
        isolation.enable()
        self.addCleanup(isolation.disable)  # type: ignore[attr-defined]
        super().setUp()  # type: ignore[misc]


@dataclass
class Holding:
    """A name held from a test by :func:`hold`, on a thread of its own."""

    name: str
    kind: Kind
    holder_ids: list[str] = field(default_factory=list)
    _release: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def release(self) -> None:
        """Give the name back now (also done when the ``with`` block ends)."""
        self._release.set()
        if self._thread is not None:
            self._thread.join(timeout=30)


@contextmanager
def hold(
    name: str,
    *,
    kind: Kind = "lock",
    limit: int = 1,
    timeout: float = 60,
    release_after: float | None = None,
    using: str | None = None,
    client: Any = None,
) -> Iterator[Holding]:
    """Hold lock ``name`` (or every slot of semaphore ``name`` of ``limit``) while the block
    runs, from a thread of its own, as another process would: code under test then finds it
    taken. ``release_after`` gives it back after that many seconds (to test a caller that
    waits). Raises LockError if the name cannot be taken at once."""
    holding = Holding(name, kind)
    ready = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        held: list[Lock | Semaphore] = []
        try:
            for _ in range(limit if kind == "semaphore" else 1):
                primitive: Lock | Semaphore
                if kind == "lock":
                    primitive = Lock(name, timeout=timeout, using=using, client=client)
                else:
                    primitive = Semaphore(name, limit, timeout=timeout, using=using, client=client)
                if not primitive.acquire(blocking=False):
                    raise LockError(f"cannot hold {kind} {name!r}: it is taken already")
                held.append(primitive)
                holding.holder_ids.append(str(primitive.holder_id))
        except BaseException as exc:
            failure.append(exc)
        finally:
            ready.set()
        try:
            holding._release.wait(release_after)
        finally:
            for primitive in held:
                with contextlib.suppress(LockError):  # it ran out meanwhile: nothing to give
                    primitive.release()

    holding._thread = threading.Thread(target=run, name=f"drl-test-hold {name}", daemon=True)
    holding._thread.start()
    ready.wait()
    if failure:
        holding.release()
        raise failure[0]
    try:
        yield holding
    finally:
        holding.release()


@dataclass
class CapturedHolds:
    """The holds taken and given back while :func:`capture_holds` ran."""

    events: list[Event] = field(default_factory=list)

    def names(self, event: str = "acquired") -> list[str]:
        """The names that had ``event`` ("acquired", "released", "contended", "timed_out",
        "lost", "expired"...)."""
        return [e.name for e in self.events if e.event == event]

    def assert_held(self, name: str, *, kind: Kind = "lock") -> None:
        """Assert that ``name`` was acquired and then released while capturing: what ran
        between those two ran under it."""
        acquired = [e for e in self.events if e.name == name and e.kind == kind]
        taken = [e.holder_id for e in acquired if e.event == "acquired"]
        given_back = {e.holder_id for e in acquired if e.event == "released"}
        if not any(holder in given_back for holder in taken):
            seen = sorted({f"{e.kind} {e.name}: {e.event}" for e in self.events})
            raise AssertionError(
                f"no {kind} {name!r} was acquired and released; seen: {seen or 'nothing'}"
            )

    def assert_not_held(self, name: str, *, kind: Kind = "lock") -> None:
        """Assert that nothing acquired ``name`` while capturing."""
        if any(e.name == name and e.kind == kind and e.event == "acquired" for e in self.events):
            raise AssertionError(f"{kind} {name!r} was acquired")


@contextmanager
def capture_holds() -> Iterator[CapturedHolds]:
    """Record the hold events of every lock and semaphore while the block runs."""
    captured = CapturedHolds()
    mutex = threading.Lock()

    def record(event: Event) -> None:
        with mutex:
            captured.events.append(event)

    subscribe(record)
    try:
        yield captured
    finally:
        unsubscribe(record)


def _pytest_fixtures() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    try:
        import pytest
    except ImportError:  # pragma: no cover - pytest is optional
        return None

    @pytest.fixture(autouse=True)
    def locks_namespace() -> Iterator[str]:
        """Each test: a lock namespace of its own (its name is the fixture's value)."""
        namespace = f"test-{secrets.token_hex(4)}"
        with isolated_locks(namespace):
            yield namespace

    @pytest.fixture
    def hold_lock() -> Callable[..., Any]:
        """:func:`hold`, as a fixture: ``with hold_lock("report:42"): ...``."""
        return hold

    return locks_namespace, hold_lock


_fixtures = _pytest_fixtures()
if _fixtures is not None:
    locks_namespace, hold_lock = _fixtures

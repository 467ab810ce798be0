"""The virtual clock that the scripts (through sim:clock) and the core's monotonic reads follow."""

from __future__ import annotations

import contextlib
import importlib
import time as real_time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

#: Where virtual time starts (ms since the epoch): a realistic server clock.
EPOCH_MS = 1_700_000_000_000

#: Core modules that read ``time.monotonic()`` on the paths the simulation drives.
TIMED_MODULES = (
    "django_redis_locks.core.runtime.acquiring",
    "django_redis_locks.core.runtime.holds",
    "django_redis_locks.core.lock",
    "django_redis_locks.core.semaphore",
    "django_redis_locks.core.holding",
    "django_redis_locks.core.hold_events",
    "django_redis_locks.core.runtime.renewal",
    "django_redis_locks.core.handoff",
)


class VirtualClock:
    """Whole milliseconds of virtual time; ``monotonic()`` is the same instant in seconds."""

    def __init__(self) -> None:
        self.now_ms = EPOCH_MS

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("virtual time never goes back")
        self.now_ms += ms

    def monotonic(self) -> float:
        return self.now_ms / 1000

    def seconds_to_ms(self, seconds: float) -> int:
        """A virtual instant in monotonic seconds as whole ms (rounded up: never earlier)."""
        return int(-(-round(seconds * 1_000_000) // 1000))


class _VirtualTime:
    """Stands in for the ``time`` module inside a core module: monotonic() is virtual."""

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock

    def monotonic(self) -> float:
        return self._clock.monotonic()

    def __getattr__(self, name: str) -> Any:
        return getattr(real_time, name)


@contextlib.contextmanager
def virtual_time(clock: VirtualClock) -> Iterator[None]:
    """Make the core modules' ``time.monotonic()`` read ``clock`` while the block runs."""
    saved: list[tuple[ModuleType, Any]] = []
    fake = _VirtualTime(clock)
    try:
        for name in TIMED_MODULES:
            module = importlib.import_module(name)
            if hasattr(module, "time"):
                saved.append((module, module.time))
                module.time = fake  # type: ignore[attr-defined]
        yield
    finally:
        for module, original in saved:
            module.time = original  # type: ignore[attr-defined]

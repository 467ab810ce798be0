"""A simulated renewer: add/remove/reclaim record work that the simulator performs as steps."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any

from django_redis_locks.core.protocol.scripting import Call
from django_redis_locks.core.runtime.holds import Hold
from django_redis_locks.core.runtime.renewal_work import (
    Reclaim,
    Renewal,
    next_renewal,
    reclaim_replied,
    renewal_replied,
)

from .clock import VirtualClock

#: Core modules that call ``renewer()``.
RENEWER_MODULES = (
    "django_redis_locks.core.runtime.acquiring",
    "django_redis_locks.core.holding",
    "django_redis_locks.core.runtime.driver",
    "django_redis_locks.core.lock",
    "django_redis_locks.core.semaphore",
    "django_redis_locks.core.handoff",
)


class SimRenewer:
    """Records renewals and reclaims; :meth:`renewed` and :meth:`settled` apply a reply with
    the real lanes' own functions (renewal_work.renewal_replied, renewal_work.reclaim_replied)."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.renewals: dict[int, Renewal] = {}
        self.reclaims: list[Reclaim] = []

    def add(self, renewal: Renewal) -> None:
        renewal.due = next_renewal(renewal.hold, self.clock.monotonic())
        self.renewals[id(renewal.hold)] = renewal

    def sooner(self, hold: Hold) -> None:
        renewal = self.renewals.get(id(hold))
        if renewal is not None:
            renewal.due = min(renewal.due, next_renewal(hold, self.clock.monotonic()))

    def remove(self, hold: Hold) -> None:
        self.renewals.pop(id(hold), None)

    def reclaim(self, backend: Any, call: Call, lifetime: float, what: str) -> None:
        self.reclaims.append(Reclaim.new(backend, call, lifetime, what))

    def watch(
        self, backend: Any, call: Call, until: float, lifetime: float, what: str, *, now: bool
    ) -> None:
        self.reclaims.append(Reclaim.watching(backend, call, until, lifetime, what, now=now))

    def __contains__(self, hold: Hold) -> bool:
        return id(hold) in self.renewals

    def renewed(self, renewal: Renewal, generation: int, result: Any, sent_at: float) -> str:
        """Apply a renewal's reply (an exception: no reply); say what came of it."""
        return renewal_replied(renewal, generation, result, sent_at, self._lost)

    def _lost(self, renewal: Renewal, reason: str, generation: int) -> None:
        self.remove(renewal.hold)
        if renewal.hold.lose(reason, generation):
            renewal.hold.report_lost()

    def settled(self, item: Reclaim, result: Any) -> bool:
        """Apply a reclaim's reply; True when it is done."""
        return reclaim_replied(item, result)


@contextlib.contextmanager
def simulated_renewer(renewer: SimRenewer, new_token: Callable[[], str]) -> Iterator[None]:
    """Make the core's ``renewer()`` return ``renewer`` and its tokens come from ``new_token``
    (seeded: equal scores in a queue are ordered by token, so tokens are part of a replay)."""
    saved: list[tuple[Any, str, Any]] = []
    try:
        for name in RENEWER_MODULES:
            module = importlib.import_module(name)
            if hasattr(module, "renewer"):
                saved.append((module, "renewer", module.renewer))
                module.renewer = lambda: renewer  # type: ignore[attr-defined]
        for name in ("django_redis_locks.core.primitive", "django_redis_locks.core.handoff"):
            module = importlib.import_module(name)
            saved.append((module, "new_token", module.new_token))
            module.new_token = new_token  # type: ignore[attr-defined]
        yield
    finally:
        for module, attribute, original in reversed(saved):
            setattr(module, attribute, original)

"""Which faults a history may inject, how often, and a count of those it did inject."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field, replace

#: Faults at an effect a client yields (a script, a wait, a clean-up).
EFFECT_FAULTS = (
    "delay",  # the request stays in flight a while: other clients go first
    "drop_reply",  # the script ran; the client gets LockBackendError (an unknown outcome)
    "drop_request",  # the script never ran; the client gets LockBackendError
    "resend",  # the script runs twice (a client library's retry); the second reply counts
    "late_resend",  # a copy of the request arrives again much later
    "cancel",  # asyncio.CancelledError thrown into the operation instead of the effect
    "cancel_after",  # the effect ran, then the task was cancelled before it saw the reply
    "interrupt",  # KeyboardInterrupt thrown into the operation instead of the effect
    "crash",  # the process dies: its clients stop, its subscription goes away
    "unreachable",  # a Detach cannot reach Redis: its clean-up goes to the reclaim queue
    "replicas_short",  # an EvalWait reports fewer replicas than asked for
)
#: Faults of wake-up messages, per process.
WAKE_FAULTS = ("wake_lost", "wake_dup", "wake_delay", "stale_sub")
ALL_FAULTS = EFFECT_FAULTS + WAKE_FAULTS


@dataclass(frozen=True)
class FaultPlan:
    """Probabilities per fault kind (per effect, or per wake-up message)."""

    rates: dict[str, float] = field(default_factory=dict)

    @classmethod
    def draw(cls, rng: random.Random, late: bool) -> FaultPlan:
        """A random mix: some kinds on, each at a low rate; a few histories have none.
        Without ``late`` no late copies (drawn all the same, so seeds stay comparable)."""
        if rng.random() < 0.1:
            return cls({})
        kinds = [kind for kind in ALL_FAULTS if rng.random() < 0.5]
        rates = {kind: rng.choice((0.01, 0.03, 0.08)) for kind in kinds}
        if not late:
            rates.pop("late_resend", None)
        return cls(rates)

    def rate(self, kind: str) -> float:
        return self.rates.get(kind, 0.0)

    def without(self, kind: str) -> FaultPlan:
        return replace(self, rates={k: v for k, v in self.rates.items() if k != kind})

    def pick(self, rng: random.Random, kinds: tuple[str, ...]) -> str | None:
        """One of ``kinds`` by its rate, or None. Always draws once (replays stay aligned)."""
        roll = rng.random()
        for kind in kinds:
            roll -= self.rate(kind)
            if roll < 0:
                return kind
        return None


class FaultLog(Counter[str]):
    """How many faults of each kind a run injected."""

    def line(self) -> str:
        return ", ".join(f"{kind} {count}" for kind, count in sorted(self.items())) or "none"

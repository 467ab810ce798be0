"""What a primitive tells whoever listens (:mod:`.events`), as a base class of
:class:`.holding.Holding`: each event built from the primitive and the hold or the call it is
about, and only when someone listens."""

from __future__ import annotations

import time
from typing import Any, ClassVar, Literal

from .events import Event, EventType, emit, listening
from .runtime.acquiring import Request
from .runtime.holds import Hold

__all__ = ["Telling"]


class Telling:
    """Builds and sends a primitive's events; the subclass sets the attributes below."""

    kind: ClassVar[Literal["lock", "semaphore"]]
    name: str
    metadata: dict[str, Any]
    metric_name: str | None

    def _emit(
        self,
        event: EventType,
        hold: Hold | None,
        *,
        reason: str | None = None,
        retry_after: float | None = None,
        waited: float | None = None,
        held: float | None = None,
        handed_over: bool | None = None,
    ) -> None:
        if listening(event):
            label = self.metadata.get("label")
            emit(
                Event(
                    event=event,
                    kind=self.kind,
                    name=self.name,
                    holder_id=None if hold is None else hold.holder_id,
                    fence=None if hold is None else hold.fence,
                    label=None if label is None else str(label),
                    reason=reason,
                    retry_after=retry_after,
                    waited=waited,
                    held=held,
                    metric_name=self.metric_name,
                    handed_over=handed_over,
                )
            )

    def _abandoned(self, request: Request[Any], event: Literal["cancelled", "failed"]) -> None:
        """The acquire call ends without a hold: cancelled or interrupted, or Redis failed."""
        self._emit(event, None, waited=time.monotonic() - request.asked_at)

    def _given_back(self, hold: Hold, reason: str | None = None) -> None:
        """The owner gave the hold back (once per hold, whether the release was answered)."""
        if not hold.release_told:
            hold.release_told = True
            self._emit("released", hold, reason=reason, held=time.monotonic() - hold.granted_at)

    def _contended(self, request: Request[Any], retry_after: float | None, blocking: bool) -> None:
        waited = time.monotonic() - request.asked_at
        self._emit(
            "timed_out" if blocking else "contended", None, retry_after=retry_after, waited=waited
        )

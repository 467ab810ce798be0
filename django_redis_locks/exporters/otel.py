"""OpenTelemetry metrics and spans of locks and semaphores, from the core's events.

``pip install django-redis-locks[opentelemetry]`` (opentelemetry-api 1.30 or newer), then once
per process, after your SDK is set up::

    from django_redis_locks.exporters import otel

    otel.install()  # the global providers; or meter_provider=..., tracer_provider=...

Metrics (attributes ``redis_locks.kind``, "lock" or "semaphore", and ``redis_locks.name``, the
bounded name of :func:`.prometheus.label_of`):

- ``redis_locks.wait.duration`` (histogram, s; ``redis_locks.outcome``: acquired, contended,
  timed_out, cancelled, failed): how long acquire calls took, waiting included;
- ``redis_locks.hold.duration`` (histogram, s; ``redis_locks.outcome``: released, lost,
  expired);
- ``redis_locks.events`` (counter; ``redis_locks.event``): what happened to holds, with the
  values of the Prometheus exporter's ``event`` label;
- ``redis_locks.holds`` (up-down counter): holds taken and not given back.

Spans, each made when it ends, with the start the event's timing gives, so nothing is kept
between events: ``redis_locks.wait`` (the acquire call, waiting included) and
``redis_locks.hold`` (from the grant to the release, or to the moment its loss was found),
children of the span current where the event happened: the caller's, for an acquire and a
release (a decorated view's request span, a task's span); a loss the renewer finds is
reported on the library's callback thread, where its hold span is a root span. Attributes:
the metric attributes, plus ``redis_locks.lock_name`` (the name itself: spans are not
aggregated), ``redis_locks.holder_id`` and ``redis_locks.fence`` where known.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django_redis_locks.core.events import Event, subscribe, unsubscribe

from .prometheus import WAIT_BUCKETS, label_of

__all__ = ["install", "uninstall"]

_SCOPE = "django_redis_locks"
_mutex = threading.Lock()
_installed: dict[tuple[int, int], _Exporter] = {}


class _Exporter:
    def __init__(self, meter_provider: Any, tracer_provider: Any) -> None:
        from opentelemetry import metrics, trace

        meter = metrics.get_meter(_SCOPE, meter_provider=meter_provider)
        self.tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        # (the SDK's default buckets are for milliseconds: 0, 5, 10, 25... would put every
        # wait under 5 s in one bucket)
        self.wait, self.hold = (
            meter.create_histogram(
                f"redis_locks.{what}.duration",
                unit="s",
                description=description,
                explicit_bucket_boundaries_advisory=list(WAIT_BUCKETS),
            )
            for what, description in (
                ("wait", "How long acquire calls took."),
                ("hold", "How long holds lasted."),
            )
        )
        self.events = meter.create_counter(
            "redis_locks.events", description="What happened to holds."
        )
        self.holds = meter.create_up_down_counter(
            "redis_locks.holds", description="Holds taken and not given back."
        )

    def __call__(self, event: Event) -> None:
        attributes = {"redis_locks.kind": event.kind, "redis_locks.name": label_of(event)}
        self.events.add(1, {**attributes, "redis_locks.event": event.event})
        if event.handed_over:
            self.events.add(1, {**attributes, "redis_locks.event": "handed_over"})
        if event.event == "acquired":
            self.holds.add(1, attributes)
        elif event.event in ("released", "lost", "expired"):
            self.holds.add(-1, attributes)
        outcome = {**attributes, "redis_locks.outcome": event.event}
        if event.waited is not None:
            self.wait.record(event.waited, outcome)
            self._span("redis_locks.wait", event, event.waited, outcome)
        if event.held is not None:
            self.hold.record(event.held, outcome)
            self._span("redis_locks.hold", event, event.held, outcome)

    def _span(self, name: str, event: Event, seconds: float, attributes: dict[str, str]) -> None:
        end = time.time_ns()
        details: dict[str, Any] = {**attributes, "redis_locks.lock_name": event.name}
        if event.holder_id is not None:
            details["redis_locks.holder_id"] = event.holder_id
        if event.fence is not None:
            details["redis_locks.fence"] = event.fence
        span = self.tracer.start_span(
            name, attributes=details, start_time=end - int(max(seconds, 0.0) * 1e9)
        )
        span.end(end_time=end)


def install(meter_provider: Any = None, tracer_provider: Any = None) -> None:
    """Record the library's events as OpenTelemetry metrics and spans from now on (default:
    the global providers). Installing again with the same providers does nothing.

    Raises ImportError (naming the extra) when opentelemetry-api is not installed.
    """
    try:
        import opentelemetry.metrics
        import opentelemetry.trace  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "the OpenTelemetry exporter needs opentelemetry-api: "
            "pip install 'django-redis-locks[opentelemetry]'"
        ) from exc
    key = (id(meter_provider), id(tracer_provider))
    with _mutex:
        if key in _installed:
            return
        exporter = _installed[key] = _Exporter(meter_provider, tracer_provider)
    subscribe(exporter)


def uninstall(meter_provider: Any = None, tracer_provider: Any = None) -> None:
    """Stop recording for these providers (tests, reloads)."""
    with _mutex:
        exporter = _installed.pop((id(meter_provider), id(tracer_provider)), None)
    if exporter is not None:
        unsubscribe(exporter)

"""The OpenTelemetry exporter, read from the SDK's in-memory span exporter and metric reader."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from django_redis_locks.core import Backend, Lock, LockLost
from django_redis_locks.core.registry import force_release
from django_redis_locks.exporters import otel


@dataclass
class Telemetry:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer_provider: TracerProvider

    def finished(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name == name]

    def points(self, metric: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for m in scope.metrics
            if m.name == metric
            for point in m.data.data_points
        ]


def attributes(span: ReadableSpan) -> Any:
    assert span.attributes is not None
    return span.attributes


def times(span: ReadableSpan) -> tuple[int, int]:
    assert span.start_time is not None and span.end_time is not None
    return span.start_time, span.end_time


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    meter_provider = MeterProvider(metric_readers=[reader])
    otel.install(meter_provider=meter_provider, tracer_provider=tracer_provider)
    yield Telemetry(spans, reader, tracer_provider)
    otel.uninstall(meter_provider=meter_provider, tracer_provider=tracer_provider)
    meter_provider.shutdown()


def test_wait_and_hold_spans_are_children_of_the_callers_span(
    backend: Backend, telemetry: Telemetry
) -> None:
    tracer = telemetry.tracer_provider.get_tracer("test")
    holder = Lock("order:1", client=backend, timeout=10, metric_name="order")
    waiter = Lock("order:1", client=backend, timeout=10, metric_name="order")
    assert holder.acquire()
    with tracer.start_as_current_span("request") as request:
        assert not waiter.acquire(timeout=0.2)
    holder.release()
    with tracer.start_as_current_span("job") as job:
        assert waiter.acquire()
        time.sleep(0.1)
        waiter.release()

    waits = telemetry.finished("redis_locks.wait")
    holds = telemetry.finished("redis_locks.hold")
    assert [attributes(w)["redis_locks.outcome"] for w in waits] == [
        "acquired",
        "timed_out",
        "acquired",
    ]
    timed_out, acquired = waits[1], waits[2]
    assert timed_out.parent is not None
    assert timed_out.parent.span_id == request.get_span_context().span_id
    start, end = times(timed_out)
    assert end - start >= 0.2e9
    assert acquired.parent is not None and acquired.parent.span_id == job.get_span_context().span_id
    hold = holds[-1]
    assert hold.parent is not None and hold.parent.span_id == job.get_span_context().span_id
    start, end = times(hold)
    assert end - start >= 0.1e9
    assert start >= times(acquired)[1] - 1_000_000  # the hold begins at the grant
    details = attributes(hold)
    assert details["redis_locks.name"] == "order"
    assert details["redis_locks.lock_name"] == "order:1"
    assert details["redis_locks.holder_id"] == attributes(acquired)["redis_locks.holder_id"]


def test_metrics_are_recorded_under_the_bounded_name(
    backend: Backend, telemetry: Telemetry
) -> None:
    lock = Lock("order:2", client=backend, timeout=10, metric_name="order")
    assert lock.acquire()
    assert not Lock("order:2", client=backend, metric_name="order").acquire(blocking=False)
    lock.release()
    holder_id_lock = Lock("order:3", client=backend, timeout=10, metric_name="order")
    assert holder_id_lock.acquire()
    holder_id = holder_id_lock.holder_id
    assert holder_id is not None and force_release("order:3", holder_id, client=backend)
    with pytest.raises(LockLost):
        holder_id_lock.ensure_held()

    def counts(metric: str, key: str) -> dict[str, float]:
        return {
            p.attributes[key]: p.value
            for p in telemetry.points(metric)
            if p.attributes["redis_locks.name"] == "order"
        }

    assert counts("redis_locks.events", "redis_locks.event") == {
        "acquired": 2,
        "contended": 1,
        "released": 1,
        "lost": 1,
    }
    holds = [p.value for p in telemetry.points("redis_locks.holds")]
    assert holds == [0]  # two taken, one released, one lost
    waits = {
        p.attributes["redis_locks.outcome"]: p.count
        for p in telemetry.points("redis_locks.wait.duration")
    }
    assert waits == {"acquired": 2, "contended": 1}
    held = {
        p.attributes["redis_locks.outcome"]: p.count
        for p in telemetry.points("redis_locks.hold.duration")
    }
    # seconds-sized buckets (the SDK's default ones are for milliseconds: 0, 5, 10...)
    bounds = telemetry.points("redis_locks.wait.duration")[0].explicit_bounds
    assert bounds[:3] == (0.001, 0.0025, 0.005) and bounds[-1] == 3600
    assert held == {"released": 1, "lost": 1}
    names = {p.attributes["redis_locks.name"] for p in telemetry.points("redis_locks.events")}
    assert "order:2" not in names and "order:3" not in names


def test_a_missing_opentelemetry_is_named(monkeypatch: Any) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "opentelemetry.metrics", None)
    with pytest.raises(ImportError, match=r"django-redis-locks\[opentelemetry\]"):
        otel.install()

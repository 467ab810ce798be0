"""The Prometheus exporter, read from a real prometheus_client registry."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from django_redis_locks.core import Backend, Lock, LockLost, Semaphore
from django_redis_locks.core.registry import force_release
from django_redis_locks.exporters import prometheus
from tests.harness.servers import wait_until


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    registry = CollectorRegistry()
    prometheus.install(registry)
    yield registry
    prometheus.uninstall(registry)


def value(registry: CollectorRegistry, metric: str, **labels: str) -> float:
    return registry.get_sample_value(metric, labels) or 0.0


def test_waits_holds_and_outcomes_are_recorded_under_the_metric_name(
    backend: Backend, registry: CollectorRegistry
) -> None:
    lock = Lock("order:1", client=backend, timeout=10, metric_name="order")
    assert lock.acquire()
    order = {"kind": "lock", "name": "order"}
    assert value(registry, "redis_locks_holds", **order) == 1
    time.sleep(0.1)
    lock.release()
    assert value(registry, "redis_locks_holds", **order) == 0

    holder = Lock("order:2", client=backend, timeout=10, metric_name="order")
    assert holder.acquire()
    contender = Lock("order:2", client=backend, timeout=10, metric_name="order")
    assert not contender.acquire(blocking=False)
    assert not contender.acquire(timeout=0.2)
    holder.release()

    events = {
        event: value(registry, "redis_locks_events_total", event=event, **order)
        for event in ("acquired", "released", "contended", "timed_out", "lost")
    }
    assert events == {"acquired": 2, "released": 2, "contended": 1, "timed_out": 1, "lost": 0}
    waits = "redis_locks_wait_seconds"
    assert value(registry, f"{waits}_count", outcome="acquired", **order) == 2
    assert value(registry, f"{waits}_count", outcome="timed_out", **order) == 1
    assert value(registry, f"{waits}_sum", outcome="timed_out", **order) >= 0.2
    assert value(registry, f"{waits}_bucket", outcome="timed_out", le="0.1", **order) == 0
    holds = "redis_locks_hold_seconds"
    assert value(registry, f"{holds}_count", outcome="released", **order) == 2
    assert value(registry, f"{holds}_sum", outcome="released", **order) >= 0.1
    # the lock's own names never become label values
    names = {
        sample.labels.get("name") for metric in registry.collect() for sample in metric.samples
    }
    assert names == {"order"}


def test_a_lost_hold_is_counted_and_leaves_the_gauge(
    backend: Backend, registry: CollectorRegistry
) -> None:
    semaphore = Semaphore("export:9", 2, client=backend, timeout=10, metric_name="export")
    assert semaphore.acquire()
    export = {"kind": "semaphore", "name": "export"}
    assert value(registry, "redis_locks_holds", **export) == 1
    holder_id = semaphore.holder_id
    assert holder_id is not None
    assert force_release("export:9", holder_id, kind="semaphore", client=backend)
    with pytest.raises(LockLost):
        semaphore.ensure_held()
    assert value(registry, "redis_locks_holds", **export) == 0
    assert value(registry, "redis_locks_events_total", event="lost", **export) == 1
    assert value(registry, "redis_locks_hold_seconds_count", outcome="lost", **export) == 1
    # the forcing process knows the name only: its own event falls back to "-"
    forced = {"kind": "semaphore", "name": "-", "event": "force_released"}
    assert value(registry, "redis_locks_events_total", **forced) == 1


def test_without_a_metric_name_the_label_is_the_callers_not_the_locks_name(
    backend: Backend, registry: CollectorRegistry
) -> None:
    labelled = Lock("user:123", client=backend, metadata={"label": "shop.views.profile"})
    bare = Lock("user:456", client=backend)
    for lock in (labelled, bare):
        assert lock.acquire()
        lock.release()
    acquired = "redis_locks_events_total"
    assert value(registry, acquired, kind="lock", name="shop.views.profile", event="acquired") == 1
    assert value(registry, acquired, kind="lock", name="-", event="acquired") == 1


def test_holds_of_several_threads_add_up(backend: Backend, registry: CollectorRegistry) -> None:
    semaphore = Semaphore("pool", 3, client=backend, timeout=10, metric_name="pool")
    inside, leave = threading.Barrier(4), threading.Event()

    def hold() -> None:
        with semaphore:
            inside.wait(5)
            leave.wait(5)

    threads = [threading.Thread(target=hold) for _ in range(3)]
    for thread in threads:
        thread.start()
    inside.wait(5)
    assert value(registry, "redis_locks_holds", kind="semaphore", name="pool") == 3
    leave.set()
    for thread in threads:
        thread.join(5)
    assert value(registry, "redis_locks_holds", kind="semaphore", name="pool") == 0


def test_installing_twice_records_once_and_uninstall_removes_the_metrics(
    backend: Backend,
) -> None:
    registry = CollectorRegistry()
    prometheus.install(registry)
    prometheus.install(registry)
    try:
        lock = Lock("twice", client=backend, metric_name="twice")
        assert lock.acquire()
        lock.release()
        labels = {"kind": "lock", "name": "twice", "event": "acquired"}
        assert value(registry, "redis_locks_events_total", **labels) == 1
    finally:
        prometheus.uninstall(registry)
    assert registry.get_sample_value("redis_locks_events_total", labels) is None
    assert not list(registry.collect())


def test_a_missing_prometheus_client_is_named(monkeypatch: Any) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ImportError, match=r"django-redis-locks\[prometheus\]"):
        prometheus.install()


def test_the_grafana_dashboard_queries_what_the_exporter_exposes(
    backend: Backend, registry: CollectorRegistry
) -> None:
    """docs/grafana/redis-locks.json: every metric and label its queries name exists."""
    import json
    import re
    from pathlib import Path

    lock = Lock("dash", client=backend, metric_name="dash")
    assert lock.acquire()
    lock.release()
    exposed = {sample.name for metric in registry.collect() for sample in metric.samples}
    labels = {"le", "kind", "name", "event", "outcome"}
    path = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "redis-locks.json"
    dashboard = json.loads(path.read_text(encoding="utf-8"))
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) >= 6
    for expr in exprs:
        assert set(re.findall(r"redis_locks_\w+", expr)) <= exposed, expr
        for grouped in re.findall(r"by \(([^)]*)\)", expr):
            assert {label.strip() for label in grouped.split(",")} <= labels, expr
        assert set(re.findall(r"(\w+)=~", expr)) <= labels, expr
    for variable in dashboard["templating"]["list"][1:]:
        found = re.search(r"redis_locks_\w+", variable["query"]["query"])
        assert found is not None and found[0] in exposed


def test_a_hand_over_is_counted_beside_the_acquire(
    backend: Backend, registry: CollectorRegistry
) -> None:
    holder = Lock("handed", client=backend, timeout=10, metric_name="handed", slice_seconds=0)
    waiter = Lock("handed", client=backend, timeout=10, metric_name="handed")
    assert holder.acquire()
    got: list[bool] = []

    def wait() -> None:
        got.append(waiter.acquire(timeout=10))
        waiter.release()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.2)  # it waits
    holder.release()
    thread.join(10)
    assert got == [True]
    counted = {
        event: value(registry, "redis_locks_events_total", kind="lock", name="handed", event=event)
        for event in ("acquired", "handed_over", "released")
    }
    assert counted == {"acquired": 2, "handed_over": 1, "released": 2}


def test_a_failed_install_leaves_no_metric_behind() -> None:
    from prometheus_client import Gauge

    registry = CollectorRegistry()
    Gauge("redis_locks_holds", "taken by someone else", registry=registry)
    for _ in range(2):  # the same error each time: nothing half-registered
        with pytest.raises(ValueError, match="redis_locks_holds"):
            prometheus.install(registry)
    names = {metric.name for metric in registry.collect()}
    assert names == {"redis_locks_holds"}


def test_a_hold_left_to_expire_leaves_the_gauge_at_its_owners_next_acquire(
    backend: Backend, registry: CollectorRegistry
) -> None:
    lock = Lock("left:1", client=backend, timeout=0.2, metric_name="left")
    left = {"kind": "lock", "name": "left"}
    assert lock.acquire()
    wait_until(lambda: not lock.locked(), timeout=5, what="the hold's expiry")
    assert lock.acquire()
    assert value(registry, "redis_locks_holds", **left) == 1  # the new hold only
    assert value(registry, "redis_locks_events_total", event="expired", **left) == 1
    assert value(registry, "redis_locks_hold_seconds_count", outcome="expired", **left) == 1
    lock.release()
    assert value(registry, "redis_locks_holds", **left) == 0

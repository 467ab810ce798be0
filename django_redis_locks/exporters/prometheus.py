"""Prometheus metrics of locks and semaphores, from the core's events.

``pip install django-redis-locks[prometheus]``, then once per process (a Django app's
``ready()``, a worker's start-up)::

    from django_redis_locks.exporters import prometheus

    prometheus.install()  # prometheus_client's default registry; or install(registry=...)

and expose the registry as usual (``prometheus_client.start_http_server``, or
django-prometheus's ``/metrics``). Metrics, each with the labels ``kind`` ("lock" or
"semaphore") and ``name``:

- ``redis_locks_wait_seconds`` (histogram, label ``outcome``: ``acquired``, ``contended``,
  ``timed_out``, ``cancelled``, ``failed``): how long acquire calls took, waiting included;
- ``redis_locks_hold_seconds`` (histogram, label ``outcome``: ``released``, ``lost``,
  ``expired``): how long holds lasted, to their release, to the moment their loss was found,
  or (left to run out) to their expiry;
- ``redis_locks_events_total`` (counter, label ``event``: ``acquired``, ``handed_over`` (of
  those acquired, how many were handed over by a release while they waited), ``released``,
  ``contended``, ``timed_out``, ``cancelled``, ``failed``, ``lost``, ``expired`` (a hold
  left to run out, found by its owner's next acquire), ``renew_failed`` (a renewal that got
  no reply, then retried), ``force_released``);
- ``redis_locks_holds`` (gauge): holds this process took and has not given back (released,
  found lost, or found expired); in prometheus_client's multiprocess mode, the sum over live
  processes.

``name`` stays bounded: the event's ``metric_name`` (a decorated call's key template, or
``metric_name=`` given to ``Lock``, ``Semaphore`` or ``@redis_lock``), else the caller label of
its metadata (a function's dotted name), else ``"-"``; never the lock's own name, which takes
one value per order or user. Events are built only while an exporter (or another listener)
is installed.
"""

from __future__ import annotations

import threading
from typing import Any

from django_redis_locks.core.events import Event, subscribe, unsubscribe

__all__ = ["WAIT_BUCKETS", "install", "label_of", "uninstall"]

#: Histogram buckets, in seconds: from an uncontended acquire (well under a millisecond) to a
#: long wait or hold.
WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
                120, 300, 600, 1800, 3600)  # fmt: skip

_mutex = threading.Lock()
_installed: dict[int, _Exporter] = {}  # id(registry) -> its exporter


def label_of(event: Event) -> str:
    """The ``name`` label of ``event``: bounded, never the lock's own name."""
    return event.metric_name or event.label or "-"


class _Exporter:
    def __init__(self, prefix: str) -> None:
        """The metrics, not registered yet (see :func:`install`)."""
        from prometheus_client import Counter, Gauge, Histogram

        registry = None
        labels = ("kind", "name")
        self.wait, self.hold = (
            Histogram(
                f"{prefix}_{what}_seconds",
                doc,
                (*labels, "outcome"),
                registry=registry,
                buckets=WAIT_BUCKETS,
            )
            for what, doc in (
                ("wait", "How long acquire calls took, waiting included, by outcome."),
                ("hold", "How long holds lasted, to their release or to the moment their loss "
                 "was found."),
            )
        )  # fmt: skip
        self.events = Counter(
            f"{prefix}_events",
            "What happened to holds: acquired, handed_over, released, contended, timed_out, "
            "cancelled, failed, lost, expired, renew_failed, force_released.",
            (*labels, "event"),
            registry=registry,
        )
        self.holds = Gauge(
            f"{prefix}_holds",
            "Holds this process took and has not given back.",
            labels,
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.collectors = (self.wait, self.hold, self.events, self.holds)

    def __call__(self, event: Event) -> None:
        kind, name = event.kind, label_of(event)
        self.events.labels(kind, name, event.event).inc()
        if event.handed_over:
            self.events.labels(kind, name, "handed_over").inc()
        if event.waited is not None:
            self.wait.labels(kind, name, event.event).observe(event.waited)
        if event.held is not None:
            self.hold.labels(kind, name, event.event).observe(event.held)
        if event.event == "acquired":
            self.holds.labels(kind, name).inc()
        elif event.event in ("released", "lost", "expired"):
            self.holds.labels(kind, name).dec()


def install(registry: Any = None, *, prefix: str = "redis_locks") -> None:
    """Record the library's events as metrics in ``registry`` (default: prometheus_client's
    ``REGISTRY``) from now on. Installing again into the same registry does nothing.

    Raises ImportError (naming the extra) when prometheus_client is not installed.
    """
    try:
        import prometheus_client
    except ImportError as exc:
        raise ImportError(
            "the Prometheus exporter needs prometheus_client: "
            "pip install 'django-redis-locks[prometheus]'"
        ) from exc
    registry = prometheus_client.REGISTRY if registry is None else registry
    with _mutex:
        if id(registry) in _installed:
            return
        exporter = _Exporter(prefix)
        registered: list[Any] = []
        try:
            for collector in exporter.collectors:
                registry.register(collector)
                registered.append(collector)
        except BaseException:  # (a name taken already): leave none of them behind
            for collector in registered:
                registry.unregister(collector)
            raise
        _installed[id(registry)] = exporter
    subscribe(exporter)


def uninstall(registry: Any = None) -> None:
    """Stop recording into ``registry`` and remove its metrics from it (tests, reloads)."""
    if registry is None:
        import prometheus_client

        registry = prometheus_client.REGISTRY
    with _mutex:
        exporter = _installed.pop(id(registry), None)
    if exporter is not None:
        unsubscribe(exporter)
        for collector in exporter.collectors:
            registry.unregister(collector)

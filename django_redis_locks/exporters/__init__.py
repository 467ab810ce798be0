"""Metrics and traces built on the core's events (:mod:`django_redis_locks.core.events`), each
an extra: :mod:`.prometheus` (``pip install django-redis-locks[prometheus]``) and :mod:`.otel`
(OpenTelemetry metrics and spans, ``pip install django-redis-locks[opentelemetry]``). Nothing
here is imported, and nothing is paid, until an exporter is installed."""

"""Benchmarks: django-redis-locks side by side with its peers, on one Redis server per run.

Run everything with ``bin/bench`` (or ``python -m benchmarks --help`` for the options). The
pieces, each meant to be extended:

- :mod:`benchmarks.registry`: the implementations under test (ours, the peers, the floors,
  the semaphores), each behind the small :class:`~benchmarks.registry.LockAdapter` interface;
- :mod:`benchmarks.measurements`: one module per measurement, listed in its ``MEASUREMENTS``;
- :mod:`benchmarks.pool`: persistent worker processes that run measurement tasks in step;
- :mod:`benchmarks.report`: ``results.md``, ``results.json`` and the plots;
- :mod:`benchmarks.django_site`: the minimal Django project of the decorator measurement.
"""

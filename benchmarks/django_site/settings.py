"""Settings of the decorator benchmark's Django project: no database, no middleware, one
django-redis cache alias for the locks on the benchmark's own server.

The server's URL comes from ``DRL_BENCH_REDIS_URL``, which the benchmark's worker sets
before ``django.setup()``.
"""

from __future__ import annotations

import os

SECRET_KEY = "benchmarks-only-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["testserver"]
ROOT_URLCONF = "benchmarks.django_site.urls"
INSTALLED_APPS = ["django_redis_locks"]
MIDDLEWARE: list[str] = []
DATABASES: dict[str, dict[str, str]] = {}
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "locks": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ.get("DRL_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
        "OPTIONS": {"SOCKET_TIMEOUT": 5, "SOCKET_CONNECT_TIMEOUT": 5},
    },
}
DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks"}

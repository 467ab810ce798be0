"""Django settings for the test suite. The Redis location is filled in by tests/conftest.py."""

from __future__ import annotations

import os

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
ROOT_URLCONF = "tests.urls"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_redis_locks",
    "tests.testapp",  # semaphore-limited management commands for the command tests
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "/static/"
# Django's task framework (django.tasks from Django 6.0, the django-tasks backport before):
# tasks run at once by default; "deferred" keeps what is enqueued (it supports run_after).
try:
    import django.tasks  # noqa: F401

    TASKS_MODULE = "django.tasks"
except ImportError:
    TASKS_MODULE = "django_tasks"
TASKS = {
    "default": {"BACKEND": f"{TASKS_MODULE}.backends.immediate.ImmediateBackend"},
    "deferred": {"BACKEND": f"{TASKS_MODULE}.backends.dummy.DummyBackend"},
}
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
    # a second database, for holds that follow the transaction of the one they name
    "other": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
}

# Which cache backend carries the locks in this run: "django_redis", "django" (built-in) or
# "django_valkey".
CACHE_BACKEND = os.environ.get("DRL_TEST_CACHE_BACKEND", "django_redis")
# Placeholder until the test session's own server is known (see tests/conftest.py).
REDIS_LOCATION = "redis://127.0.0.1:1/0"


def redis_caches(location: str, backend: str = CACHE_BACKEND) -> dict[str, dict[str, object]]:
    """CACHES for ``location``: a "default" cache and a "locks" alias on the same server."""
    if backend == "django_redis":
        entry: dict[str, object] = {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": location,
            "OPTIONS": {"SOCKET_TIMEOUT": 5, "SOCKET_CONNECT_TIMEOUT": 5},
        }
    elif backend == "django_valkey":
        entry = {
            "BACKEND": "django_valkey.cache.ValkeyCache",
            "LOCATION": location.replace("redis://", "valkey://", 1),
            "OPTIONS": {"SOCKET_TIMEOUT": 5, "SOCKET_CONNECT_TIMEOUT": 5},
        }
    elif backend == "django":
        entry = {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": location,
            "OPTIONS": {"socket_timeout": 5, "socket_connect_timeout": 5},
        }
    else:
        raise ValueError(
            f"DRL_TEST_CACHE_BACKEND must be django_redis, django or django_valkey, not {backend!r}"
        )
    return {"default": dict(entry), "locks": dict(entry)}


CACHES = redis_caches(REDIS_LOCATION)
DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks"}

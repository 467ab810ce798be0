"""Settings of the example project.

Redis comes from $REDIS_URL and the SQLite file from $DEMO_DATABASE (``run_demo.py`` sets both:
an embedded server and a temporary directory); without them, a local Redis and
``example_project/demo.sqlite3``.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import django

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-not-secret")
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "example.urls"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_redis_locks",
    "example",
]
# Django's task framework: django.tasks from Django 6.0, the django-tasks backport (an app) before.
if django.VERSION >= (6, 0):
    TASKS_MODULE = "django.tasks"
else:
    TASKS_MODULE = "django_tasks"
    INSTALLED_APPS.append("django_tasks")
# Tasks run at once, in the process that enqueues them (a real project would use a queue).
TASKS = {"default": {"BACKEND": f"{TASKS_MODULE}.backends.immediate.ImmediateBackend"}}
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
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
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DEMO_DATABASE") or BASE_DIR / "demo.sqlite3",
    }
}
STATIC_URL = "static/"

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
REDIS_TIMEOUTS = {"SOCKET_TIMEOUT": 5, "SOCKET_CONNECT_TIMEOUT": 5}
CACHES = {
    # The ordinary cache, which a deploy may clear at any time: on a database of its own...
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": urlunsplit(urlsplit(REDIS_URL)._replace(path="/1")),
        "OPTIONS": REDIS_TIMEOUTS,
    },
    # ...and an alias of its own for the locks, which nothing clears.
    "locks": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": REDIS_TIMEOUTS,
    },
}
DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "DEFAULT_TIMEOUT": 30}

"""Settings of the deployment project, all from the environment set by the test:

- ``DRL_DEPLOY_REDIS_URL``, ``DRL_DEPLOY_NAMESPACE``: the locks' server and key namespace;
- ``DRL_DEPLOY_LOG``: the file every run of a decorated function appends its line to;
- ``DRL_DEPLOY_WORKER``: the label of the server or pool, written in those lines;
- ``DRL_DEPLOY_BROKER_URL`` (Celery only): broker and result backend;
- ``DRL_DEPLOY_DATABASE`` (Django tasks only): the SQLite file of the database backend.
"""

from __future__ import annotations

import os
from typing import Any

from tests.testapp.log_lines import LOGGING  # noqa: F401 - a setting

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "tests.deploy.project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
WSGI_APPLICATION = "tests.deploy.project.wsgi.application"
INSTALLED_APPS = ["django_redis_locks"]
MIDDLEWARE: list[str] = []

CACHES = {
    "locks": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ["DRL_DEPLOY_REDIS_URL"],
        "OPTIONS": {"SOCKET_TIMEOUT": 5, "SOCKET_CONNECT_TIMEOUT": 5},
    }
}
CACHES["default"] = dict(CACHES["locks"])
DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": os.environ["DRL_DEPLOY_NAMESPACE"]}

DATABASES: dict[str, dict[str, Any]] = {}
if os.environ.get("DRL_DEPLOY_DATABASE"):
    # Django's task framework: django.tasks from Django 6.0, the django-tasks backport
    # before; the database backend and its db_worker command come from django-tasks-db.
    try:
        import django.tasks  # noqa: F401
    except ImportError:
        INSTALLED_APPS.append("django_tasks")
    INSTALLED_APPS.append("django_tasks_db")
    DATABASES["default"] = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["DRL_DEPLOY_DATABASE"],
        # two workers and a client share the file: readers never wait for a writer (WAL)
        "OPTIONS": {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL;"},
    }
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

if os.environ.get("DRL_DEPLOY_BROKER_URL"):
    CELERY_BROKER_URL = os.environ["DRL_DEPLOY_BROKER_URL"]
    CELERY_RESULT_BACKEND = os.environ["DRL_DEPLOY_BROKER_URL"]
    CELERY_TASK_DEFAULT_QUEUE = os.environ["DRL_DEPLOY_NAMESPACE"]  # this test's queue only
    CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
    CELERY_WORKER_PREFETCH_MULTIPLIER = 1  # a waiting task does not hold others back
    CELERY_RESULT_EXPIRES = 600

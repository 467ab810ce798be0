"""Settings of the test project (``python -m tests.testapp``): Redis and namespace from the
environment.

``DRL_TEST_REDIS_URL`` and ``DRL_TEST_NAMESPACE`` are set by the test that starts the
process; ``DRL_TEST_CACHE_BACKEND`` picks the cache backend as for the suite. Only the apps
the commands need, so that a process starts fast.
"""

from __future__ import annotations

import os

from tests.settings import redis_caches
from tests.testapp.log_lines import LOGGING  # noqa: F401 - a setting

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
INSTALLED_APPS = ["django_redis_locks", "tests.testapp"]
# A database only for the commands that use one (DRL_TEST_DATABASE: an SQLite file).
DATABASES: dict[str, dict[str, str]] = {}
if os.environ.get("DRL_TEST_DATABASE"):
    DATABASES["default"] = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["DRL_TEST_DATABASE"],
    }

CACHES = redis_caches(os.environ["DRL_TEST_REDIS_URL"])
DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": os.environ["DRL_TEST_NAMESPACE"]}

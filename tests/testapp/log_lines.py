"""The logging settings of the test projects run as processes: the library's log lines on
stderr as ``LOG <level> <logger>: <message>``, for the tests to look for."""

from __future__ import annotations

from typing import Any

LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "LOG %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"django_redis_locks": {"handlers": ["stderr"], "level": "WARNING"}},
}

"""Test-suite wiring: real Redis servers from tests.harness, Django pointed at them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from django_redis_locks.core import Backend
from tests import settings as test_settings
from tests.harness import clients

pytest_plugins = ["tests.harness.plugin"]

#: Run first: the longest single test (the simulation's histories), so that with several
#: workers (bin/test) it does not start last and hold up the end of the run.
FIRST = ("tests/simulation/test_simulation.py",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(FIRST))  # (a stable sort)


@pytest.fixture(scope="session", autouse=True)
def _django_on_test_redis(redis_server: Any) -> Iterator[None]:
    """Point every Redis cache alias of the test settings at the session's server."""
    with override_settings(CACHES=test_settings.redis_caches(redis_server.url)):
        yield


@pytest.fixture
def backend(redis_server: Any, namespace: str) -> Iterator[Backend]:
    """A core Backend on the session server, with a namespace of the test's own.

    Its client logs in through the server's URL: as the library's ACL user in ACL mode
    (``redis_client`` stays the unrestricted client for looking at the data).
    """
    with clients.sync_from_url(redis_server.url, socket_timeout=5) as client:
        backend = Backend(client, namespace=namespace)
        yield backend
        backend.close()

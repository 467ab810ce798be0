"""A private redis-server for the simulation tier, started by the test harness."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.harness.servers import RedisServer


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "simulation: seeded deterministic histories of the protocol (in the default run; "
        "DRL_SIM_HISTORIES sets how many)",
    )


@pytest.fixture(scope="session")
def sim_client() -> Iterator[redis.Redis]:
    """A client of a private server that only the simulation uses (it is flushed per history)."""
    server = RedisServer()
    server.start()
    try:
        with server.client(socket_timeout=10) as client:
            yield client
    finally:
        server.stop()

"""Pytest fixtures giving tests real Redis/Valkey servers, replicas and a cluster."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator, Sequence
from typing import Protocol

import pytest
import redis

from tests.harness.servers import (
    ExternalServer,
    HarnessError,
    RedisCluster,
    RedisServer,
    ServerBinary,
    find_server_binary,
    start_replica,
    stop_all,
)

Server = RedisServer | ExternalServer


class MakeServer(Protocol):
    def __call__(
        self,
        *,
        binary: ServerBinary | None = None,
        port: int | None = None,
        extra_args: Sequence[str] = (),
    ) -> RedisServer: ...


class MakeReplica(Protocol):
    def __call__(
        self,
        primary: RedisServer,
        *,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        timeout: float = 10.0,
    ) -> RedisServer: ...


def external_server_from_env() -> ExternalServer | None:
    """The server named by $REDIS_URL, if set; a UsageError if it is not acceptable."""
    url = os.environ.get("REDIS_URL", "").strip()
    if not url:
        return None
    try:
        return ExternalServer(url)
    except (HarnessError, ValueError) as exc:
        raise pytest.UsageError(f"REDIS_URL: {exc}") from exc


def pytest_configure(config: pytest.Config) -> None:
    external_server_from_env()  # refuse a bad REDIS_URL before any test runs


def pytest_report_header(config: pytest.Config) -> list[str]:
    try:
        binary = find_server_binary()
    except HarnessError as exc:
        lines = [f"redis test server: none found ({exc})"]
    else:
        lines = [f"redis test server: {binary.flavour} {binary.version} ({binary.path})"]
    external = external_server_from_env()
    if external is not None:  # host and port only: the URL may hold a password
        lines.append(f"redis_server fixture: external REDIS_URL {external.host}:{external.port}")
    return lines


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    stop_all()  # whatever a crashed test or a forgotten server left running


@pytest.fixture(scope="session")
def server_binary() -> ServerBinary:
    """The redis-server/valkey-server binary the harness starts."""
    return find_server_binary()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Server]:
    """The session's shared server ($REDIS_URL or one started here); no fault injection on it."""
    external = external_server_from_env()
    if external is not None:
        external.check()
        yield external
        return
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="session")
def redis_url(redis_server: Server) -> str:
    return redis_server.url


@pytest.fixture
def redis_client(redis_server: Server) -> Iterator[redis.Redis]:
    """A fresh client of the session server, closed after the test."""
    with redis_server.client(socket_timeout=5) as client:
        yield client


@pytest.fixture
def namespace() -> str:
    """A key prefix unique to this test (the shared server is never flushed)."""
    return "t" + secrets.token_hex(4)


@pytest.fixture
def make_server() -> Iterator[MakeServer]:
    """Start private servers to pause/kill/restart; all are stopped after the test."""
    made: list[RedisServer] = []

    def make(
        *,
        binary: ServerBinary | None = None,
        port: int | None = None,
        extra_args: Sequence[str] = (),
    ) -> RedisServer:
        server = RedisServer(binary=binary, port=port, extra_args=extra_args)
        made.append(server)
        return server.start()

    yield make
    for server in reversed(made):
        server.stop()


@pytest.fixture
def make_replica() -> Iterator[MakeReplica]:
    """Start replicas of a harness server (in sync on return); all are stopped after the test."""
    made: list[RedisServer] = []

    def make(
        primary: RedisServer,
        *,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        timeout: float = 10.0,
    ) -> RedisServer:
        replica = start_replica(primary, port=port, extra_args=extra_args, timeout=timeout)
        made.append(replica)
        return replica

    yield make
    for replica in reversed(made):
        replica.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A 3-master Redis Cluster, started on first use and shared by the session."""
    with RedisCluster(3) as cluster:
        yield cluster

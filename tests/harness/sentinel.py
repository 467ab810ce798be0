"""A Sentinel-managed primary for tests: a primary, its replicas and Sentinels (``redis-server
--sentinel``, or Valkey's) on free loopback ports, all stopped for sure.

Each Sentinel runs from a config file of its own in its temp dir (Sentinels rewrite it). The
data nodes carry the library's ACL user when one is given; the Sentinels and the harness talk
to them as the unrestricted default user.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Self

from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.harness.acl import AclUser
from tests.harness.servers import (
    HOST,
    HarnessError,
    ProcessGroup,
    RedisServer,
    ServerBinary,
    find_server_binary,
    probe_client,
    start_replica,
    wait_until,
)

#: The name the Sentinels monitor the primary under.
SERVICE = "drl-primary"


class SentinelServer(RedisServer):
    """One Sentinel process monitoring ``service`` at ``primary``."""

    def __init__(
        self,
        primary: RedisServer,
        *,
        service: str = SERVICE,
        quorum: int = 2,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 10_000,
        binary: ServerBinary | None = None,
    ) -> None:
        super().__init__(binary=binary or primary.binary)
        self.service = service
        self._monitor = (primary.host, primary.port, quorum)
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms

    def __repr__(self) -> str:
        return super().__repr__().replace("<RedisServer", "<SentinelServer", 1)

    def argv(self) -> list[str]:
        assert self.tmpdir is not None
        host, port, quorum = self._monitor
        config = os.path.join(self.tmpdir, "sentinel.conf")
        lines = [
            f"port {self.port}",
            f"bind {self.host}",
            "daemonize no",
            "protected-mode no",
            f"dir {self.tmpdir}",
            f"logfile {os.path.join(self.tmpdir, 'server.log')}",
            f"sentinel monitor {self.service} {host} {port} {quorum}",
            f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}",
            f"sentinel failover-timeout {self.service} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {self.service} 2",
        ]
        with open(config, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
        return [self.binary.path, config, "--sentinel"]

    def master(self) -> dict[str, Any]:
        """``SENTINEL MASTER <service>`` as this Sentinel sees it."""
        with probe_client(self) as client:
            reply: dict[str, Any] = client.sentinel_master(self.service)
            return reply

    def master_address(self) -> tuple[str, int]:
        with probe_client(self) as client:
            host, port = client.sentinel_get_master_addr_by_name(self.service)
            return str(host), int(port)


class SentinelGroup(ProcessGroup):
    """A primary, ``replicas`` replicas and ``sentinels`` Sentinels (quorum: a majority).

    ``servers`` are the data nodes in start order; ``primary`` is whichever of them the
    Sentinels name now. Use as a context manager, or ``start()`` then ``stop()``.
    """

    def __init__(
        self,
        *,
        replicas: int = 2,
        sentinels: int = 3,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 10_000,
        binary: ServerBinary | None = None,
        acl_user: AclUser | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.binary = binary if binary is not None else find_server_binary()
        self.replica_count = replicas
        self.sentinel_count = sentinels
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.acl_user = acl_user
        self.extra_args = tuple(extra_args)
        self.service = SERVICE
        self.servers: list[RedisServer] = []
        self.sentinels: list[SentinelServer] = []

    def __repr__(self) -> str:
        return f"<SentinelGroup {self.binary.flavour} {self.binary.version} {self.service}>"

    def started(self) -> bool:
        return bool(self.servers)

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [(s.host, s.port) for s in self.sentinels]

    @property
    def quorum(self) -> int:
        return self.sentinel_count // 2 + 1

    def start(self, timeout: float = 30.0) -> Self:
        """Start the data nodes (replicas in sync), then the Sentinels; wait until every
        Sentinel knows every replica and every other Sentinel."""
        if self.servers:
            raise HarnessError(f"{self!r} was already started")
        try:
            primary = RedisServer(
                binary=self.binary, acl_user=self.acl_user, extra_args=self.extra_args
            )
            self.servers.append(primary)
            primary.start()
            for _ in range(self.replica_count):
                self.servers.append(start_replica(primary, extra_args=self.extra_args))
            for _ in range(self.sentinel_count):
                sentinel = SentinelServer(
                    primary,
                    quorum=self.quorum,
                    down_after_ms=self.down_after_ms,
                    failover_timeout_ms=self.failover_timeout_ms,
                )
                self.sentinels.append(sentinel)
                sentinel.start(timeout)
            wait_until(self._settled, timeout=timeout, what=f"{self!r} to settle", servers=self.all)
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def all(self) -> list[RedisServer]:
        return [*self.servers, *self.sentinels]

    def _settled(self) -> bool:
        primary = self.primary_by_role()
        for sentinel in self.sentinels:
            state = sentinel.master()
            if (
                (state["ip"], int(state["port"])) != (primary.host, primary.port)
                or int(state["num-slaves"]) != self.replica_count
                or int(state["num-other-sentinels"]) != self.sentinel_count - 1
                or state.get("is_sdown")
                or state.get("is_odown")
            ):
                return False
        return True

    def primary_by_role(self) -> RedisServer:
        """The one running, unpaused data node whose role is master."""
        found = []
        for server in self.servers:
            if not server.is_running or server.paused:
                continue
            with probe_client(server) as client:
                if client.info("replication")["role"] == "master":
                    found.append(server)
        if len(found) != 1:
            raise HarnessError(f"{self!r}: {len(found)} primaries by role: {found}")
        return found[0]

    def primary(self) -> RedisServer:
        """The data node a majority of the Sentinels name as the primary now."""
        votes: dict[tuple[str, int], int] = {}
        for sentinel in self.sentinels:
            if sentinel.is_running and not sentinel.paused:
                address = sentinel.master_address()
                votes[address] = votes.get(address, 0) + 1
        for server in self.servers:
            if votes.get((server.host, server.port), 0) >= self.quorum:
                return server
        raise HarnessError(f"{self!r}: no primary named by a majority of Sentinels: {votes}")

    def replicas(self) -> list[RedisServer]:
        """The running data nodes that are not the primary."""
        primary = self.primary()
        return [s for s in self.servers if s is not primary and s.is_running]

    def wait_for_failover(self, old: RedisServer, timeout: float = 30.0) -> RedisServer:
        """Wait until every running Sentinel names another primary than ``old`` and that
        node is a master by role; return it."""
        found: list[RedisServer] = []

        def switched() -> bool:
            addresses = {
                s.master_address() for s in self.sentinels if s.is_running and not s.paused
            }
            if len(addresses) != 1 or addresses == {(old.host, old.port)}:
                return False
            (address,) = addresses
            for server in self.servers:
                if (server.host, server.port) == address and server.is_running:
                    with probe_client(server) as client:
                        if client.info("replication")["role"] == "master":
                            found[:] = [server]
                            return True
            return False

        wait_until(
            switched, timeout=timeout, what=f"{self!r} to fail over from {old!r}", servers=self.all
        )
        return found[0]

    def sentinel_kwargs(self) -> dict[str, Any]:
        """Settings for clients of the Sentinels themselves: short timeouts, no retries."""
        return {"socket_timeout": 0.5, "socket_connect_timeout": 0.5, "retry": _no_retry()}

    def stop(self) -> None:
        """Stop the Sentinels (first: no failover while the data nodes stop), then the data
        nodes, replicas first. Idempotent."""
        for server in [*reversed(self.sentinels), *reversed(self.servers)]:
            server.stop()


def _no_retry() -> Retry:
    return Retry(NoBackoff(), 0)


__all__ = ["HOST", "SERVICE", "SentinelGroup", "SentinelServer"]

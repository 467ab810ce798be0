"""CLIENT_FACTORY targets for the Django tests; the tests set the URL they need first."""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio
import redis.cluster

from django_redis_locks.connection import ClientFactory

#: The harness cluster's URL, for ClusterFactory (set by the test).
CLUSTER_URL: str | None = None
#: A private server's URL, for plain_client (set by the test).
SERVER_URL: str | None = None
#: (alias, client) for every client made here, so that the tests can count and close them.
made: list[tuple[str, Any]] = []

#: Importable, but neither a ClientFactory nor callable.
NOT_A_FACTORY = 42


def _required(url: str | None, name: str) -> str:
    if url is None:
        raise RuntimeError(f"set tests.django.factories.{name} before using this factory")
    return url


class ClusterFactory(ClientFactory):
    """A ClientFactory subclass: a RedisCluster client for the harness cluster."""

    def get_client(self, alias: str) -> Any:
        url = _required(CLUSTER_URL, "CLUSTER_URL")
        client = redis.cluster.RedisCluster.from_url(
            url, socket_timeout=5, socket_connect_timeout=5
        )
        made.append((alias, client))
        return client


def plain_client(alias: str) -> Any:
    """A plain callable factory: a Redis client for one private server."""
    url = _required(SERVER_URL, "SERVER_URL")
    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    made.append((alias, client))
    return client


class PlainFactory(ClientFactory):
    """A ClientFactory subclass that makes its asyncio clients itself."""

    def get_client(self, alias: str) -> Any:
        return plain_client(alias)

    def get_async_client(self, alias: str) -> Any:
        url = _required(SERVER_URL, "SERVER_URL")
        client = redis.asyncio.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        made.append((alias, client))
        return client

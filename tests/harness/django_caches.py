"""Django settings that reach a Sentinel-managed primary, the three ways the reference shows:
django-redis's ``SentinelClient``, Django's built-in ``RedisCache`` on redis-py's Sentinel
pool, and a ``CLIENT_FACTORY`` (:class:`SentinelFactory`). Worker processes and tests build
their settings here, so both run what the reference documents."""

from __future__ import annotations

from typing import Any, Literal

from django.conf import settings
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel

from django_redis_locks.connection import ClientFactory

Kind = Literal["django_redis", "django", "factory"]  # the ways to reach Sentinel
KINDS: tuple[Kind, ...] = ("django_redis", "django", "factory")
#: The cache alias the locks use in these settings.
ALIAS = "locks"


def sentinel_settings(
    kind: Kind,
    *,
    service: str,
    sentinels: list[tuple[str, int]],
    login: str = "",
    socket_timeout: float = 0.5,
    namespace: str = "drl",
) -> dict[str, Any]:
    """``CACHES``, ``DJANGO_REDIS_LOCKS`` (and, for ``factory``, ``LOCKS_SENTINEL``) for a
    project whose locks alias reaches ``service`` through ``sentinels``; ``login`` is
    ``user:password@`` for the data nodes (the Sentinels need none)."""
    location = f"redis://{login}{service}/0"
    timeouts = {"socket_timeout": socket_timeout, "socket_connect_timeout": socket_timeout}
    locks: dict[str, Any] = {"CACHE_ALIAS": ALIAS, "NAMESPACE": namespace}
    extra: dict[str, Any] = {}
    if kind == "django_redis":
        cache: dict[str, Any] = {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": location,
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.SentinelClient",
                "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
                "SENTINELS": sentinels,
                "SOCKET_TIMEOUT": socket_timeout,
                "SOCKET_CONNECT_TIMEOUT": socket_timeout,
            },
        }
    else:
        cache = {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": location,
            "OPTIONS": {
                "pool_class": "redis.sentinel.SentinelConnectionPool",
                "service_name": service,
                "sentinel_manager": Sentinel(sentinels, sentinel_kwargs=dict(timeouts)),
                **timeouts,
            },
        }
        if kind == "factory":
            locks["CLIENT_FACTORY"] = "tests.harness.django_caches.SentinelFactory"
            extra["LOCKS_SENTINEL"] = {
                "service": service,
                "sentinels": sentinels,
                "login": login,
                "socket_timeout": socket_timeout,
            }
    return {"CACHES": {ALIAS: cache}, "DJANGO_REDIS_LOCKS": locks, **extra}


class SentinelFactory(ClientFactory):
    """The reference's ``CLIENT_FACTORY`` for Sentinel: the primary's client from redis-py's
    ``Sentinel.master_for``, configured by the project's own ``LOCKS_SENTINEL`` setting."""

    def get_client(self, alias: str) -> Any:
        config = getattr(settings, "LOCKS_SENTINEL")  # noqa: B009 - a project setting
        timeouts = {
            "socket_timeout": config["socket_timeout"],
            "socket_connect_timeout": config["socket_timeout"],
        }
        user, _, password = config["login"].rstrip("@").partition(":")
        sentinel = Sentinel(config["sentinels"], sentinel_kwargs=dict(timeouts))
        return sentinel.master_for(
            config["service"], username=user or None, password=password or None, **timeouts
        )


def cluster_settings(
    *,
    nodes: list[tuple[str, int]],
    login: str = "",
    socket_timeout: float = 0.5,
    namespace: str = "drl",
) -> dict[str, Any]:
    """Settings whose locks reach a Redis Cluster through the reference's ``CLIENT_FACTORY``
    (:class:`ClusterFactory`, configured by the project's own ``LOCKS_CLUSTER``)."""
    return {
        "CACHES": {ALIAS: {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
        "DJANGO_REDIS_LOCKS": {
            "CACHE_ALIAS": ALIAS,
            "NAMESPACE": namespace,
            "CLIENT_FACTORY": "tests.harness.django_caches.ClusterFactory",
        },
        "LOCKS_CLUSTER": {"nodes": nodes, "login": login, "socket_timeout": socket_timeout},
    }


class ClusterFactory(ClientFactory):
    """The reference's ``CLIENT_FACTORY`` for a Redis Cluster."""

    def get_client(self, alias: str) -> Any:
        config = getattr(settings, "LOCKS_CLUSTER")  # noqa: B009 - a project setting
        user, _, password = config["login"].rstrip("@").partition(":")
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in config["nodes"]],
            username=user or None,
            password=password or None,
            socket_timeout=config["socket_timeout"],
            socket_connect_timeout=config["socket_timeout"],
        )

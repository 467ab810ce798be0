"""The Django layer: DJANGO_REDIS_LOCKS settings and the cache alias -> Redis connection."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import valkey.asyncio
import valkey.exceptions
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_redis_locks import Lock, LockBackendError, LockConfigurationError
from django_redis_locks.checks import check_settings
from django_redis_locks.conf import Config, get_config
from tests.django import factories
from tests.harness.servers import wait_until
from tests.helpers import held_ttl_ms, is_held
from tests.settings import redis_caches

BACKENDS = ["django_redis", "django", "django_valkey"]
ASYNC_CLIENT: dict[str, Any] = {
    "django_redis": redis.asyncio.Redis,
    "django": redis.asyncio.Redis,
    "django_valkey": valkey.asyncio.Valkey,
}
TIMEOUT_OPTIONS = {
    "django_redis": ("SOCKET_TIMEOUT", "SOCKET_CONNECT_TIMEOUT"),
    "django": ("socket_timeout", "socket_connect_timeout"),
    "django_valkey": ("SOCKET_TIMEOUT", "SOCKET_CONNECT_TIMEOUT"),
}


def cache_entry(url, backend, *, socket_timeout=5):
    """One CACHES entry of ``backend`` for ``url``, with both socket timeouts set."""
    entry = redis_caches(url, backend)["locks"]
    entry["OPTIONS"] = dict.fromkeys(TIMEOUT_OPTIONS[backend], socket_timeout)
    return entry


def lock_keys(client, namespace, name):
    """The keys of lock ``name`` under ``namespace`` on the server(s) of ``client`` that hold a
    live hold."""
    suffix = f":lock:{name}".encode()
    keys = [key for key in client.scan_iter(match=f"{namespace}:*") if key.endswith(suffix)]
    return [key for key in keys if is_held(client, key)]


def pttl(client, namespace, name):
    [key] = lock_keys(client, namespace, name)
    return held_ttl_ms(client, key)


@pytest.fixture
def two_servers(make_server):
    """Two private servers, with a client for each (closed after the test)."""
    first, second = make_server(), make_server()
    with first.client() as first_client, second.client() as second_client:
        yield (first, first_client), (second, second_client)


@pytest.fixture
def factory_clients(monkeypatch):
    """The clients the test's CLIENT_FACTORY makes; the sync ones are closed after the test.

    (The asyncio ones are closed by the Backend when their event loop ends.)
    """
    made: list[tuple[str, Any]] = []
    monkeypatch.setattr(factories, "made", made)
    yield made
    for _, client in made:
        if not isinstance(client, redis.asyncio.Redis):
            client.close()


# -- settings ------------------------------------------------------------------------------
def test_defaults_apply_when_the_setting_is_absent(redis_client, namespace) -> None:
    name = f"defaults-{namespace}"  # under the default namespace, shared by the session
    custom = {"CACHE_ALIAS": "default", "NAMESPACE": namespace, "DEFAULT_TIMEOUT": 7}
    with override_settings(DJANGO_REDIS_LOCKS=custom):
        with Lock(name):  # the alias's connection is made with the custom settings
            assert 6_000 < pttl(redis_client, namespace, name) <= 7_000
        absent = override_settings()  # deleting a setting sends no setting_changed signal
        absent.enable()
        try:
            del django_settings.DJANGO_REDIS_LOCKS
            assert get_config() == Config(
                cache_alias="default",
                namespace="drl",
                default_timeout=60.0,
                on_redis_error="fail_closed",
                client_factory=None,
                replica_wait_timeout=1.0,
            )
            with Lock(name) as lock:
                assert lock.backend.name == "alias 'default'"
                assert 59_000 < pttl(redis_client, "drl", name) <= 60_000
        finally:
            absent.disable()  # restoring it sends no signal either
        with Lock(name):
            assert 6_000 < pttl(redis_client, namespace, name) <= 7_000
    assert get_config().cache_alias == "locks"  # the test settings are back
    assert not lock_keys(redis_client, "drl", name)


def test_namespace_override_changes_the_keys_at_once(redis_client, namespace) -> None:
    other = namespace + "-other"
    with override_settings(DJANGO_REDIS_LOCKS={"CACHE_ALIAS": "locks", "NAMESPACE": namespace}):
        with Lock("job", timeout=5):
            assert len(lock_keys(redis_client, namespace, "job")) == 1
            with (
                override_settings(DJANGO_REDIS_LOCKS={"CACHE_ALIAS": "locks", "NAMESPACE": other}),
                Lock("job", timeout=5),
            ):
                assert len(lock_keys(redis_client, other, "job")) == 1
        assert not lock_keys(redis_client, namespace, "job")
    assert not lock_keys(redis_client, other, "job")


def test_default_timeout_override_sets_the_ttl_of_locks_without_timeout(
    redis_client, namespace
) -> None:
    for seconds in (7, 90):
        config = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace, "DEFAULT_TIMEOUT": seconds}
        with override_settings(DJANGO_REDIS_LOCKS=config), Lock(f"ttl-{seconds}") as lock:
            assert lock.timeout is None
            assert (seconds - 1) * 1000 < pttl(redis_client, namespace, lock.name) <= seconds * 1000


@pytest.mark.parametrize(
    ("value", "named"),
    [
        pytest.param({"NAMSPACE": "x"}, "NAMSPACE", id="unknown-key"),
        pytest.param(["CACHE_ALIAS", "locks"], "must be a dict", id="not-a-dict"),
        pytest.param({"CACHE_ALIAS": ""}, "CACHE_ALIAS", id="empty-alias"),
        pytest.param({"CACHE_ALIAS": 5}, "CACHE_ALIAS", id="alias-not-str"),
        pytest.param({"ON_REDIS_ERROR": "ignore"}, "ON_REDIS_ERROR", id="bad-policy"),
        pytest.param({"NAMESPACE": "a{b"}, "NAMESPACE", id="namespace-brace"),
        pytest.param({"NAMESPACE": "a b"}, "NAMESPACE", id="namespace-space"),
        pytest.param({"NAMESPACE": ""}, "NAMESPACE", id="namespace-empty"),
        pytest.param({"DEFAULT_TIMEOUT": 0}, "DEFAULT_TIMEOUT", id="timeout-zero"),
        pytest.param({"DEFAULT_TIMEOUT": "10"}, "DEFAULT_TIMEOUT", id="timeout-str"),
        pytest.param({"DEFAULT_TIMEOUT": True}, "DEFAULT_TIMEOUT", id="timeout-bool"),
        pytest.param({"REPLICA_WAIT_TIMEOUT": -1}, "REPLICA_WAIT_TIMEOUT", id="replica-wait"),
        pytest.param({"CLIENT_FACTORY": 5}, "CLIENT_FACTORY", id="factory-not-str"),
        pytest.param({"RETRY_AFTER_MAX": 0}, "RETRY_AFTER_MAX", id="retry-after-zero"),
        pytest.param({"RETRY_AFTER_MAX": 1.5}, "RETRY_AFTER_MAX", id="retry-after-float"),
        pytest.param({"RETRY_AFTER_MAX": True}, "RETRY_AFTER_MAX", id="retry-after-bool"),
        pytest.param({"VIEW_ON_LOCK_LOST": "ignore"}, "VIEW_ON_LOCK_LOST", id="view-on-lost"),
    ],
)
def test_invalid_settings_raise_improperly_configured_naming_the_key(value, named) -> None:
    with override_settings(DJANGO_REDIS_LOCKS=value):
        with pytest.raises(ImproperlyConfigured) as info:
            get_config()
        assert named in str(info.value)
        assert "DJANGO_REDIS_LOCKS" in str(info.value)
        with pytest.raises(ImproperlyConfigured):
            Lock("x", timeout=5).acquire()  # the lock reads the same settings
    assert get_config().cache_alias == "locks"


# -- connection: cache aliases -------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_locks_use_the_configured_alias_and_using_picks_another(
    backend, two_servers, namespace
) -> None:
    (default_server, on_default), (locks_server, on_locks) = two_servers
    caches = {
        "default": cache_entry(default_server.url, backend),
        "locks": cache_entry(locks_server.url, backend),
    }
    config = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    with override_settings(CACHES=caches, DJANGO_REDIS_LOCKS=config):
        with Lock("configured", timeout=5):
            assert lock_keys(on_locks, namespace, "configured")
            assert not lock_keys(on_default, namespace, "configured")
        with Lock("chosen", timeout=5, using="default"):
            assert lock_keys(on_default, namespace, "chosen")
            assert not lock_keys(on_locks, namespace, "chosen")
        with (
            override_settings(DJANGO_REDIS_LOCKS={**config, "CACHE_ALIAS": "default"}),
            Lock("switched", timeout=5),
        ):
            assert lock_keys(on_default, namespace, "switched")
            assert not lock_keys(on_locks, namespace, "switched")


def test_a_caches_override_alone_moves_the_locks_at_once(
    make_server, redis_client, namespace
) -> None:
    server = make_server()
    config = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    with override_settings(DJANGO_REDIS_LOCKS=config), server.client() as on_server:
        with Lock("before", timeout=5):  # the alias's connection is made (and kept) here
            assert lock_keys(redis_client, namespace, "before")
        with override_settings(CACHES=redis_caches(server.url)), Lock("moved", timeout=5):
            assert lock_keys(on_server, namespace, "moved")
            assert not lock_keys(redis_client, namespace, "moved")
        with Lock("back", timeout=5):
            assert lock_keys(redis_client, namespace, "back")
            assert not lock_keys(on_server, namespace, "back")


@pytest.mark.parametrize("backend", BACKENDS)
def test_locks_use_the_first_location_of_a_replicated_alias(
    backend, two_servers, redis_server, namespace
) -> None:
    (primary, on_primary), (replica, on_replica) = two_servers
    locks = cache_entry(primary.url, backend)
    locks["LOCATION"] = [primary.url, replica.url]  # reads would go to the second one
    caches = {"default": cache_entry(redis_server.url, backend), "locks": locks}
    config = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    with override_settings(CACHES=caches, DJANGO_REDIS_LOCKS=config):
        for name in ("a", "b", "c"):
            with Lock(name, timeout=5):
                assert lock_keys(on_primary, namespace, name)
        assert not list(on_replica.scan_iter(match=f"{namespace}:*"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_settings_change_closes_the_connections_the_locks_made(
    backend, make_server, redis_server, namespace
) -> None:
    server = make_server()
    caches = {
        "default": cache_entry(redis_server.url, backend),
        "locks": cache_entry(server.url, backend),
    }
    config = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    with server.client() as probe:

        def lock_connections():
            return len(probe.client_list()) - 1  # all but the probe's own

        with override_settings(CACHES=caches, DJANGO_REDIS_LOCKS=config):
            with Lock("x", timeout=5):
                pass
            assert lock_connections() == 1
        wait_until(lambda: lock_connections() == 0, timeout=2, what="the lock connection to close")


@pytest.mark.parametrize("backend", BACKENDS)
def test_sync_and_async_locks_work_on_each_cache_backend(
    backend, make_server, redis_server, namespace
) -> None:
    server = make_server()
    caches = {
        "default": cache_entry(redis_server.url, backend),
        # db 3 and a 4 s socket timeout: settings the asyncio client must carry over
        "locks": cache_entry(f"redis://{server.host}:{server.port}/3", backend, socket_timeout=4),
    }
    config = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    with override_settings(CACHES=caches, DJANGO_REDIS_LOCKS=config), server.client(db=3) as probe:
        sync_lock = Lock("sync", timeout=5)
        assert sync_lock.acquire(blocking=False)
        assert lock_keys(probe, namespace, "sync")
        assert not Lock("sync", timeout=5).acquire(blocking=False)
        sync_lock.release()
        assert not lock_keys(probe, namespace, "sync")

        async def use_async_lock():
            lock = Lock("async", timeout=5)
            assert await lock.aacquire(blocking=False)
            client = await lock.backend.aclient()
            held = bool(lock_keys(probe, namespace, "async"))
            contended = await Lock("async", timeout=5).aacquire(blocking=False)
            await lock.arelease()
            return client, held, contended

        client, held, contended = asyncio.run(use_async_lock())
        assert held and not contended
        assert not lock_keys(probe, namespace, "async")
        assert type(client) is ASYNC_CLIENT[backend]
        kwargs = client.connection_pool.connection_kwargs
        assert (kwargs["port"], kwargs["db"], kwargs["socket_timeout"]) == (server.port, 3, 4)


def test_unknown_alias_names_it_and_the_known_aliases() -> None:
    with pytest.raises(LockConfigurationError) as info:
        Lock("x", timeout=5, using="nope").acquire()
    message = str(info.value)
    assert "'nope'" in message and "'default'" in message and "'locks'" in message


def test_non_redis_cache_backend_is_refused(settings, redis_server) -> None:
    settings.CACHES = {
        **redis_caches(redis_server.url),
        "locks": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
    with pytest.raises(LockConfigurationError, match="LocMemCache"):
        Lock("x", timeout=5).acquire()


def test_django_redis_shard_client_is_refused(settings, redis_server) -> None:
    base = f"redis://{redis_server.host}:{redis_server.port}"
    settings.CACHES = {
        **redis_caches(redis_server.url),
        "locks": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": [f"{base}/1", f"{base}/2"],
            "OPTIONS": {"CLIENT_CLASS": "django_redis.client.ShardClient"},
        },
    }
    with pytest.raises(LockConfigurationError, match="ShardClient"):
        Lock("x", timeout=5).acquire()


@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("django_valkey.async_cache.cache.AsyncValkeyCache", "django_valkey.cache.ValkeyCache"),
        ("django_valkey.cluster_cache.cache.ClusterValkeyCache", "valkey.cluster.ValkeyCluster"),
    ],
)
def test_valkey_caches_that_cannot_carry_locks_say_what_to_use(
    settings, redis_server, path, named
) -> None:
    settings.CACHES = {
        **redis_caches(redis_server.url),
        "locks": {"BACKEND": path, "LOCATION": redis_server.url.replace("redis", "valkey", 1)},
    }
    with pytest.raises(LockConfigurationError, match=named):
        Lock("x", timeout=5).acquire()
    # (this check alone: Django's own cache checks would make the asyncio-only cache)
    [error] = [m for m in check_settings() if m.id == "django_redis_locks.E002"]
    assert named in (error.hint or "")


# -- connection: CLIENT_FACTORY ------------------------------------------------------------
@pytest.mark.cluster
def test_client_factory_subclass_gives_cluster_locks(
    settings, monkeypatch, redis_cluster, factory_clients, namespace
) -> None:
    monkeypatch.setattr(factories, "CLUSTER_URL", redis_cluster.url)
    settings.DJANGO_REDIS_LOCKS = {
        "CLIENT_FACTORY": "tests.django.factories.ClusterFactory",
        "NAMESPACE": namespace,
    }
    with redis_cluster.client() as probe:
        with Lock("sync", timeout=5) as lock:
            assert lock.backend.cluster
            assert lock_keys(probe, namespace, "sync")

        async def use_async_lock():
            lock = Lock("async", timeout=5)
            assert await lock.aacquire(blocking=False)
            client = await lock.backend.aclient()
            held = bool(lock_keys(probe, namespace, "async"))
            await lock.arelease()
            return client, held

        client, held = asyncio.run(use_async_lock())
        assert held
        assert isinstance(client, redis.asyncio.cluster.RedisCluster)
        assert not lock_keys(probe, namespace, "sync") + lock_keys(probe, namespace, "async")


def test_callable_client_factory_gives_locks_on_its_server(
    settings, monkeypatch, make_server, redis_client, factory_clients, namespace
) -> None:
    server = make_server()
    monkeypatch.setattr(factories, "SERVER_URL", server.url)
    settings.DJANGO_REDIS_LOCKS = {
        "CLIENT_FACTORY": "tests.django.factories.plain_client",
        "NAMESPACE": namespace,
    }
    with server.client() as probe:
        with Lock("sync", timeout=5):
            assert lock_keys(probe, namespace, "sync")
            assert not lock_keys(redis_client, namespace, "sync")  # not on the cache's server

        async def use_async_lock():
            async with Lock("async", timeout=5):
                return bool(lock_keys(probe, namespace, "async"))

        assert asyncio.run(use_async_lock())
        assert not lock_keys(probe, namespace, "sync") + lock_keys(probe, namespace, "async")


def test_client_factory_is_asked_once_per_alias(
    settings, monkeypatch, make_server, factory_clients, namespace
) -> None:
    monkeypatch.setattr(factories, "SERVER_URL", make_server().url)
    settings.DJANGO_REDIS_LOCKS = {
        "CACHE_ALIAS": "locks",
        "CLIENT_FACTORY": "tests.django.factories.plain_client",
        "NAMESPACE": namespace,
    }

    async def use_async_lock():
        async with Lock("async", timeout=5):
            pass

    with Lock("sync", timeout=5), Lock("other", timeout=5, using="default"):
        pass
    asyncio.run(use_async_lock())  # each event loop gets an asyncio client of its own,
    asyncio.run(use_async_lock())  # derived from the factory's client, not a new one
    assert [alias for alias, _ in factory_clients] == ["locks", "default"]


def test_client_factory_get_async_client_is_used_per_event_loop(
    settings, monkeypatch, make_server, factory_clients, namespace
) -> None:
    server = make_server()
    monkeypatch.setattr(factories, "SERVER_URL", server.url)
    settings.DJANGO_REDIS_LOCKS = {
        "CACHE_ALIAS": "locks",
        "CLIENT_FACTORY": "tests.django.factories.PlainFactory",
        "NAMESPACE": namespace,
    }

    async def use_async_lock():
        async with Lock("async", timeout=5) as lock:
            return await lock.backend.aclient()

    first, second = asyncio.run(use_async_lock()), asyncio.run(use_async_lock())
    made = [client for _, client in factory_clients]
    assert len(made) == 3  # one sync client, then one asyncio client per event loop
    assert made[1] is first and made[2] is second
    assert all(type(client) is redis.asyncio.Redis for client in made[1:])


@pytest.mark.parametrize(
    "path",
    [
        "tests.django.factories.Missing",
        "tests.django.no_such_module.Factory",
        "no_dots",
        "tests.django.factories.NOT_A_FACTORY",
    ],
)
def test_unusable_client_factory_is_refused(settings, path) -> None:
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "CLIENT_FACTORY": path}
    with pytest.raises(LockConfigurationError, match=path):
        Lock("x", timeout=5).acquire()


# -- connection: a stalled server ----------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("connection", ["pooled", "new"])
def test_paused_server_fails_acquire_within_the_socket_timeout(
    backend, connection, make_server, redis_server, namespace
) -> None:
    server = make_server()
    caches = {
        "default": cache_entry(redis_server.url, backend),
        "locks": cache_entry(server.url, backend, socket_timeout=0.5),
    }
    config = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    with override_settings(CACHES=caches, DJANGO_REDIS_LOCKS=config):
        if connection == "pooled":
            with Lock("warm-up", timeout=5):
                pass
        server.pause()
        started = time.monotonic()
        with pytest.raises(LockBackendError) as info:
            Lock("x", timeout=5).acquire()
        elapsed = time.monotonic() - started
        server.resume()
    assert elapsed < 1.5, f"acquire took {elapsed:.2f} s"
    assert isinstance(info.value.__cause__, redis.TimeoutError | valkey.exceptions.TimeoutError)

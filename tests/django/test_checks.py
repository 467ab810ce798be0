"""The system checks (manage.py check) of django_redis_locks, through Django's registry."""

from __future__ import annotations

import asyncio
import io
import re
from pathlib import Path

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from tests.settings import redis_caches
from tests.testapp.runner import manage_processes

BACKENDS = ["django_redis", "django"]
TIMEOUT_OPTIONS = {
    "django_redis": ("SOCKET_TIMEOUT", "SOCKET_CONNECT_TIMEOUT"),
    "django": ("socket_timeout", "socket_connect_timeout"),
}
REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"


def lock_messages(*, deploy=False):
    """This app's messages from every registered check (so the check must be registered);
    with ``deploy``, those of ``check --deploy`` too."""
    found = checks.run_checks(include_deployment_checks=deploy)
    return [m for m in found if (m.id or "").startswith("django_redis_locks.")]


def lock_check_ids(*, deploy=False):
    return [message.id for message in lock_messages(deploy=deploy)]


def caches_with_locks(redis_server, locks_entry):
    return {**redis_caches(redis_server.url), "locks": locks_entry}


def cache_entry(url, backend, *, socket_timeout=None):
    """A CACHES entry of ``backend`` for ``url``; no socket timeout unless one is given."""
    entry = redis_caches(url, backend)["locks"]
    entry["OPTIONS"] = (
        {} if socket_timeout is None else dict.fromkeys(TIMEOUT_OPTIONS[backend], socket_timeout)
    )
    return entry


def test_the_test_configuration_gives_no_message() -> None:
    assert lock_messages() == []


def test_check_command_passes_on_the_test_settings() -> None:
    out = io.StringIO()
    call_command("check", stdout=out, stderr=out)
    assert "django_redis_locks" not in out.getvalue()


def test_unknown_alias_is_E001_with_a_hint(settings) -> None:
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "nope"}
    [message] = lock_messages()
    assert message.id == "django_redis_locks.E001"
    assert message.level == checks.ERROR
    assert "'nope'" in message.msg
    assert "'default'" in message.hint and "'locks'" in message.hint
    with pytest.raises(SystemCheckError, match=re.escape("django_redis_locks.E001")):
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())


def test_non_redis_cache_is_E002(settings, redis_server) -> None:
    settings.CACHES = caches_with_locks(
        redis_server, {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
    [message] = lock_messages()
    assert message.id == "django_redis_locks.E002"
    assert message.level == checks.ERROR
    assert "LocMemCache" in message.msg and message.hint


@pytest.mark.parametrize("backend", ["locmem.LocMemCache", "dummy.DummyCache"])
def test_an_in_process_cache_says_what_to_do_in_tests_instead(settings, redis_server, backend):
    settings.CACHES = caches_with_locks(
        redis_server, {"BACKEND": f"django.core.cache.backends.{backend}"}
    )
    [message] = lock_messages()
    assert message.id == "django_redis_locks.E002"
    assert "keeps its data in one process" in message.hint
    assert "django_redis_locks.testing.isolated_locks" in message.hint
    assert "docs/testing.md" in message.hint


def test_django_redis_shard_client_is_E002(settings, redis_server) -> None:
    base = f"redis://{redis_server.host}:{redis_server.port}"
    settings.CACHES = caches_with_locks(
        redis_server,
        {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": [f"{base}/1", f"{base}/2"],
            "OPTIONS": {"CLIENT_CLASS": "django_redis.client.ShardClient"},
        },
    )
    [message] = lock_messages()
    assert message.id == "django_redis_locks.E002"
    assert "ShardClient" in message.msg


@pytest.mark.parametrize(
    ("value", "named"),
    [
        pytest.param({"CACHE_ALIAS": "locks", "NAMSPACE": "x"}, "NAMSPACE", id="unknown-key"),
        pytest.param("locks", "must be a dict", id="not-a-dict"),
        pytest.param({"CACHE_ALIAS": "locks", "NAMESPACE": "a b"}, "NAMESPACE", id="namespace"),
        pytest.param({"CACHE_ALIAS": "locks", "DEFAULT_TIMEOUT": 0}, "DEFAULT_TIMEOUT", id="ttl"),
        pytest.param({"ON_REDIS_ERROR": "ignore"}, "ON_REDIS_ERROR", id="policy"),
    ],
)
def test_invalid_settings_are_E003(settings, value, named) -> None:
    settings.DJANGO_REDIS_LOCKS = value
    [message] = lock_messages()
    assert message.id == "django_redis_locks.E003"
    assert message.level == checks.ERROR
    assert named in message.msg


@pytest.mark.parametrize(
    "path", ["tests.django.no_such_module.Factory", "tests.django.factories.NOT_A_FACTORY"]
)
def test_unusable_client_factory_is_E003(settings, path) -> None:
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "CLIENT_FACTORY": path}
    [message] = lock_messages()
    assert message.id == "django_redis_locks.E003"
    assert path in message.msg


@pytest.mark.parametrize(
    "path", ["tests.django.factories.ClusterFactory", "tests.django.factories.plain_client"]
)
def test_importable_client_factory_gives_no_message(settings, path) -> None:
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "CLIENT_FACTORY": path}
    assert lock_messages() == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_alias_without_socket_timeout_is_W001(settings, make_server, redis_server, backend):
    # A server of its own: django-redis shares one pool per URL, whatever the OPTIONS say.
    url = make_server().url
    settings.CACHES = caches_with_locks(redis_server, cache_entry(url, backend))
    [message] = lock_messages()
    assert message.id == "django_redis_locks.W001"
    assert message.level == checks.WARNING
    assert "'locks'" in message.msg and message.hint


@pytest.mark.parametrize("backend", BACKENDS)
def test_alias_with_socket_timeout_has_no_W001(settings, make_server, redis_server, backend):
    url = make_server().url
    settings.CACHES = caches_with_locks(redis_server, cache_entry(url, backend, socket_timeout=2))
    assert lock_messages() == []


@pytest.mark.parametrize(
    ("alias", "expected"), [("default", ["django_redis_locks.W002"]), ("locks", [])]
)
def test_locks_on_the_default_cache_are_W002(settings, alias, expected) -> None:
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": alias}
    assert lock_check_ids() == expected


def test_check_ids_are_the_documented_stable_strings(settings, make_server, redis_server) -> None:
    seen = set()
    scenarios = [
        ({"CACHE_ALIAS": "nope"}, None),
        ({"CACHE_ALIAS": "locks"}, {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}),
        ({"CACHE_ALIAS": "locks", "DEFAULT_TIMEOUT": 0}, None),
        ({"CACHE_ALIAS": "default"}, None),
        ({"CACHE_ALIAS": "locks"}, cache_entry(make_server().url, "django")),
    ]
    evicting = make_server(extra_args=["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"])
    scenarios.append(
        ({"CACHE_ALIAS": "locks"}, cache_entry(evicting.url, "django", socket_timeout=5))
    )
    for config, locks_entry in scenarios:
        settings.DJANGO_REDIS_LOCKS = config
        if locks_entry is not None:
            settings.CACHES = caches_with_locks(redis_server, locks_entry)
        seen.update(lock_check_ids(deploy=True))
    codes = ("E001", "E002", "E003", "W001", "W002", "W003")
    expected = {f"django_redis_locks.{code}" for code in codes}
    assert seen == expected
    documented = set(re.findall(r"django_redis_locks\.[EW]\d{3}", REFERENCE.read_text()))
    assert documented == expected


@pytest.mark.parametrize(
    ("policy", "warned"),
    [("allkeys-lru", True), ("volatile-lru", True), ("allkeys-lfu", True), ("noeviction", False)],
)
def test_check_deploy_warns_W003_when_the_lock_server_evicts_keys(
    settings, make_server, redis_server, policy, warned
) -> None:
    server = make_server(extra_args=["--maxmemory", "64mb", "--maxmemory-policy", policy])
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks"}
    settings.CACHES = caches_with_locks(
        redis_server, cache_entry(server.url, "django_redis", socket_timeout=5)
    )
    assert "django_redis_locks.W003" not in lock_check_ids()  # only check --deploy connects
    out = io.StringIO()
    call_command("check", "--deploy", stdout=out, stderr=out)
    shown = out.getvalue()
    assert ("django_redis_locks.W003" in shown) is warned, shown
    if warned:
        assert f"maxmemory-policy {policy}" in shown
        assert "maxmemory-policy noeviction" in shown


def test_check_deploy_says_when_it_cannot_read_the_policy(settings, make_server, redis_server):
    server = make_server()
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks"}
    settings.CACHES = caches_with_locks(
        redis_server, cache_entry(server.url, "django_redis", socket_timeout=0.5)
    )
    server.kill()
    [message] = lock_messages(deploy=True)
    assert message.id == "django_redis_locks.W003"
    assert "Could not read" in message.msg and "noeviction" in (message.hint or "")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_location_without_a_scheme_is_E002_and_a_configuration_error_at_run_time(
    settings, redis_server, backend
) -> None:
    """``LOCATION: "127.0.0.1:6379"`` (no ``redis://``): the client library refuses the URL
    with a ValueError. It used to crash every manage.py command through this app's check,
    and every lock call, with that traceback."""
    from django_redis_locks import Lock, LockConfigurationError
    from django_redis_locks.connection import reset

    entry = cache_entry(f"{redis_server.host}:{redis_server.port}", backend, socket_timeout=5)
    settings.CACHES = caches_with_locks(redis_server, entry)
    reset()
    try:
        location = f"{redis_server.host}:{redis_server.port}"
        [message] = lock_messages()
        assert message.id == "django_redis_locks.E002"
        assert message.level == checks.ERROR
        assert message.msg == (
            f"Cache alias 'locks': its LOCATION {location!r} is not a URL (no scheme such as "
            "redis://), so no Redis client can be made from it."
        )
        assert message.hint == (
            f"Write it as a URL: 'redis://{location}/0' (rediss:// for TLS, unix:// and a "
            "path for a socket)."
        )
        # At run time the same explanation, as the library's own error, not a ValueError.
        with pytest.raises(LockConfigurationError) as raised:
            Lock("x", timeout=5).acquire()
        assert str(raised.value) == f"{message.msg} {message.hint}"
        assert isinstance(raised.value.__cause__, ValueError)
        with pytest.raises(LockConfigurationError, match=re.escape(message.hint)):
            asyncio.run(Lock("x", timeout=5).aacquire())
    finally:
        reset()


@pytest.mark.parametrize(
    ("location", "written"),
    [
        ("redis.internal", "redis://redis.internal/0"),
        ("redis.internal:6380/2", "redis://redis.internal:6380/2"),
        ("/run/redis.sock", "unix:///run/redis.sock"),
        (["10.0.0.1:6379", "10.0.0.2:6379"], "redis://10.0.0.1:6379/0"),
        ("10.0.0.1:6379,10.0.0.2:6379", "redis://10.0.0.1:6379/0"),
    ],
)
def test_the_hint_for_a_location_without_a_scheme_writes_it_as_a_url(
    settings, redis_server, location, written
) -> None:
    from django_redis_locks.connection import reset

    entry = {**cache_entry("redis://unused", "django", socket_timeout=5), "LOCATION": location}
    settings.CACHES = caches_with_locks(redis_server, entry)
    reset()
    try:
        [message] = lock_messages()
        assert message.id == "django_redis_locks.E002"
        assert message.hint.startswith(f"Write it as a URL: {written!r} "), message.hint
    finally:
        reset()


def test_manage_py_check_reports_a_location_without_a_scheme_without_a_traceback(
    redis_server, namespace
) -> None:
    """A real ``manage.py check`` of a project whose caches say ``127.0.0.1:<port>``: the
    check error and its hint, exit status 1, no traceback."""
    location = f"{redis_server.host}:{redis_server.port}"
    with manage_processes(location, namespace) as manage:
        done = manage.run("check")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert (
        f"(django_redis_locks.E002) Cache alias 'locks': its LOCATION {location!r} is not a URL"
    ) in done.stderr
    assert f"HINT: Write it as a URL: 'redis://{location}/0'" in done.stderr

"""The least-privilege Redis ACL user: exactly what the library needs, and nothing more.

On private servers started with the rule documented in docs/reference.md (namespace ``drl``):
everything the library does works as that user (locks, semaphores, blocking waits woken over
pub/sub, listings, forced releases, script reloads, ``wait_for_replicas`` with ``ROLE`` and
``WAIT``, redis-py's health-check ``PING``) without a single refusal in the server's
``ACL LOG``, and the same user is refused ``EVAL``, ``KEYS``, ``SCAN``, ``FLUSHALL``,
``CONFIG``, ``DEBUG``, other namespaces' keys and other channels. The rule in the docs is the
one the harness builds, and lists every command the scripts call.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import threading
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.cluster
from redis.exceptions import NoPermissionError

from django_redis_locks import Lock, LockBackendError, LockLost, Semaphore
from django_redis_locks.core import Backend
from django_redis_locks.inspection import force_release, get_lock, list_locks, list_semaphores
from tests.harness.acl import (
    CLIENT_COMMANDS,
    CLUSTER_COMMANDS,
    SCRIPT_COMMANDS,
    UNIQUE_TASK_COMMANDS,
    AclUser,
    acl_mode,
    denials,
    deployment_rule,
    library_user,
    namespace_user,
)
from tests.harness.servers import RedisCluster, RedisServer, probe_client, start_replica

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
#: How Redis 7 and Valkey word a refused key.
KEY_REFUSED = r"(?i)no permissions to access (a key|one of the keys)"


@pytest.fixture
def drl_server() -> Iterator[tuple[RedisServer, AclUser]]:
    """A private server whose user ``drl`` has exactly the documented rule (namespace drl)."""
    user = namespace_user("drl", secrets.token_hex(16))
    # DEBUG is allowed to the default user, so that the ACL is what refuses it to ``drl``.
    with RedisServer(acl_user=user, extra_args=["--enable-debug-command", "yes"]) as server:
        yield server, user


def as_user(server: RedisServer, **kwargs: Any) -> redis.Redis:
    return redis.Redis.from_url(server.url, socket_timeout=5, **kwargs)


def refusals(server: RedisServer, user: AclUser) -> list[str]:
    with probe_client(server) as admin:
        return denials(admin.acl_log(), user)


# -- the rule -------------------------------------------------------------------------------
def test_the_documented_rule_is_the_one_the_harness_grants() -> None:
    line = deployment_rule("drl", "<password>")
    assert line.startswith("ACL SETUSER drl reset on ><password> ~drl:* resetchannels &drl:* +")
    doc = REFERENCE.read_text()
    assert f"\n{line}\n" in doc
    explained = doc.replace("\\|", "|")  # table cells escape the pipe
    for command in (*CLIENT_COMMANDS, *SCRIPT_COMMANDS, *CLUSTER_COMMANDS):
        assert f"+{command}" in explained.split("## Redis permissions (ACL)")[1], command


def test_the_rule_grants_every_command_the_scripts_call_and_no_other() -> None:
    scripts = resources.files("django_redis_locks.core.protocol").joinpath("scripts")
    lua = [f for f in scripts.iterdir() if f.name.endswith(".lua")]
    sources = [f.read_text() for f in lua if not f.name.startswith("ticket_")]
    sources += [f.read_text() for f in scripts.joinpath("lib").iterdir()]
    called = {m.lower() for s in sources for m in re.findall(r"redis\.p?call\('(\w+)'", s)}
    assert called == set(SCRIPT_COMMANDS)
    # Unique tasks' ticket scripts: within the addition the reference lists for them.
    ticket = {
        m.lower()
        for f in lua
        if f.name.startswith("ticket_")
        for m in re.findall(r"redis\.p?call\('(\w+)'", f.read_text())
    }
    assert ticket and ticket <= set(UNIQUE_TASK_COMMANDS), ticket
    assert not re.search(r"redis\.p?call\([^']", "\n".join(sources)), "a command from a variable"


def test_the_documented_addition_for_unique_tasks_covers_every_command_they_send() -> None:
    """Unique tasks send plain commands besides the scripts (their ticket records): each one
    is in the addition docs/reference.md lists, and the suite's ACL mode grants it."""
    package = resources.files("django_redis_locks.unique")
    sources = "\n".join(f.read_text() for f in package.iterdir() if f.name.endswith(".py"))
    sent = {m.lower() for m in re.findall(r'_command\(backend, key, "(\w+)"', sources)}
    assert sent and sent <= {*UNIQUE_TASK_COMMANDS, *SCRIPT_COMMANDS}, sent  # (DEL: the rule)
    addition = " ".join(f"+{command}" for command in UNIQUE_TASK_COMMANDS)
    assert f"| `{addition}` | Unique tasks" in REFERENCE.read_text()


# -- refused --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("command", "refused"),
    [
        (("EVAL", "return 1", "0"), "eval"),
        (("KEYS", "*"), "keys"),
        (("SCAN", "0"), "scan"),
        (("FLUSHALL",), "flushall"),
        (("FLUSHDB",), "flushdb"),
        (("CONFIG", "GET", "*"), "config|get"),
        (("CONFIG", "SET", "maxmemory", "1"), "config|set"),
        (("DEBUG", "SLEEP", "0"), "debug"),
        (("SCRIPT", "FLUSH"), "script|flush"),
        (("GET", "drl:x"), "get"),
        (("SET", "drl:x", "1"), "set"),
        (("SHUTDOWN", "NOSAVE"), "shutdown"),
        (("ACL", "SETUSER", "drl", "+@all"), "acl|setuser"),
        (("CLIENT", "KILL", "TYPE", "normal"), "client|kill"),
    ],
)
def test_the_library_user_is_refused_admin_commands(
    drl_server: tuple[RedisServer, AclUser], command: tuple[str, ...], refused: str
) -> None:
    server, user = drl_server
    with as_user(server) as client, pytest.raises(NoPermissionError) as info:
        client.execute_command(*command)
    assert f"no permissions to run the '{refused}' command" in str(info.value)
    assert any(f"'{refused}'" in line for line in refusals(server, user))


def test_the_library_user_is_refused_other_namespaces_and_channels(
    drl_server: tuple[RedisServer, AclUser],
) -> None:
    server, _ = drl_server
    with as_user(server) as client:
        lock = Lock("x", client=Backend(client, namespace="drl"), timeout=5)
        assert lock.acquire()  # its own namespace: fine
        lock.release()
        other = Lock("x", client=Backend(client, namespace="other"), timeout=5)
        with pytest.raises(LockBackendError, match=KEY_REFUSED) as info:
            other.acquire()
        assert isinstance(info.value.__cause__, NoPermissionError)
        with pytest.raises(NoPermissionError, match="channel"):
            client.publish("other:wake", "lock:x#0000000000000000")
        pubsub = client.pubsub()
        with pytest.raises(NoPermissionError, match="channel"):
            pubsub.subscribe("other:wake")
            pubsub.get_message(timeout=1)  # the refusal is the subscription's reply
        pubsub.close()


# -- enough ---------------------------------------------------------------------------------
def test_the_documented_rule_is_enough_for_everything_the_library_does(
    drl_server: tuple[RedisServer, AclUser],
) -> None:
    server, user = drl_server
    # health_check_interval: redis-py PINGs connections (and the pub/sub one) idle that long.
    with as_user(server, health_check_interval=0.2) as client, probe_client(server) as admin:
        backend = Backend(client, namespace="drl")
        holder = Lock("job", client=backend, timeout=10, metadata={"label": "holder"})
        assert holder.acquire()
        assert holder.extend(5) > 10 and holder.ensure_held() > 0
        assert not Lock("job", client=backend).acquire(blocking=False)
        woken: list[float] = []

        def wait() -> None:
            started = time.monotonic()
            waiter = Lock("job", client=backend, timeout=5)
            assert waiter.acquire(timeout=10)
            woken.append(time.monotonic() - started)
            waiter.release()

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.5)  # the waiter queues and listens
        [shown] = list_locks(client=backend).items
        assert shown.holder_id == holder.holder_id
        assert getattr(get_lock("job", client=backend), "label", None) == "holder"
        admin.script_flush()  # the next call reloads its script with SCRIPT LOAD
        holder.release()
        thread.join(10)
        assert woken and woken[0] < 1.0  # handed over by the release's message, not a re-check

        semaphore = Semaphore("import", 1, client=backend, timeout=10, auto_renew=True)
        assert semaphore.acquire()
        assert semaphore.refresh() > 0
        [info] = list_semaphores(client=backend).items
        assert force_release("import", info.holders[0].holder_id, kind="semaphore", client=backend)
        with pytest.raises(LockLost):
            semaphore.ensure_held()
        time.sleep(0.3)  # past a health check interval
        assert Lock("job", client=backend).locked() is False

        async def in_asyncio() -> None:
            aclient = redis.asyncio.Redis.from_url(server.url, socket_timeout=5)
            abackend = Backend(aclient, namespace="drl")
            async with (
                Lock("async", client=abackend, timeout=5),
                Semaphore("async", 2, client=abackend, timeout=5),
            ):
                pass
            await aclient.aclose()
            abackend.close()

        asyncio.run(in_asyncio())
        backend.close()
    assert refusals(server, user) == []


def test_wait_for_replicas_needs_only_role_and_wait(
    drl_server: tuple[RedisServer, AclUser],
) -> None:
    server, user = drl_server
    replica = start_replica(server)
    try:
        with as_user(server) as client:
            backend = Backend(client, namespace="drl", replica_wait_timeout=2)
            for replicas in (1, "majority"):
                lock = Lock("replicated", client=backend, timeout=5, wait_for_replicas=replicas)
                assert lock.acquire()
                lock.release()
            backend.close()
    finally:
        replica.stop()
    assert refusals(server, user) == []


@pytest.mark.cluster
def test_on_a_cluster_the_rule_needs_cluster_slots_and_command(redis_cluster: RedisCluster) -> None:
    user = namespace_user("drl", secrets.token_hex(16), name="drl-cluster").for_cluster()
    for node in redis_cluster.nodes:
        with probe_client(node) as admin:
            admin.execute_command("ACL", "SETUSER", user.name, *user.rule())
    try:
        node = redis_cluster.nodes[0]
        client = redis.cluster.RedisCluster(
            host=node.host, port=node.port, username=user.name, password=user.password
        )
        backend = Backend(client, namespace="drl")
        names = [f"job-{i}" for i in range(20)]  # on every node
        locks = [Lock(name, client=backend, timeout=5) for name in names]
        assert all(lock.acquire() for lock in locks)
        assert {hold.name for hold in list_locks(client=backend, count=100).items} == set(names)
        for lock in locks:
            lock.release()
        with Semaphore("import", 2, client=backend, timeout=5):
            pass
        client.close()
        for node in redis_cluster.nodes:
            with probe_client(node) as admin:
                assert denials(admin.acl_log(), user) == [], node
    finally:
        for node in redis_cluster.nodes:
            with probe_client(node) as admin:
                admin.execute_command("ACL", "DELUSER", user.name)


# -- the suite's ACL mode -------------------------------------------------------------------
def logged_in_as(backend: Backend, admin: redis.Redis) -> set[str]:
    """The users that the backend's pooled connections logged in as (by their local ports)."""
    pool = backend.client.connection_pool
    made = [*getattr(pool, "_connections", ()), *getattr(pool, "_available_connections", ())]
    ports = {c._sock.getsockname()[1] for c in made if c is not None and c._sock}
    assert ports, "no pooled connection"
    return {c["user"] for c in admin.client_list() if int(c["addr"].rsplit(":")[1]) in ports}


@pytest.mark.skipif(not acl_mode(), reason="only in ACL mode (DRL_TEST_ACL=1)")
def test_in_acl_mode_the_library_logs_in_as_the_restricted_user(
    backend: Backend, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    user = library_user()
    assert user is not None and redis_server.acl_user == user
    assert f"{user.name}:{user.password}@" in redis_server.url
    Lock("probe", client=backend, timeout=5).locked()
    assert logged_in_as(backend, redis_client) == {user.name}  # the backend fixture
    django_lock = Lock("probe", using="locks", timeout=5)
    django_lock.locked()
    assert logged_in_as(django_lock.backend, redis_client) == {user.name}  # CACHES["locks"]
    assert redis_client.acl_whoami() == "default"  # test-side inspection stays unrestricted

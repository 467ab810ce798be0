"""The Lua scripts: headers, key discipline, EVALSHA with transparent reload on NOSCRIPT."""

from __future__ import annotations

import asyncio
import re
from importlib import resources

import pytest
import redis

from django_redis_locks import Lock
from django_redis_locks.core import Backend, protocol
from django_redis_locks.core.scripting import load, run_many

SCRIPTS = sorted(
    path.name.removesuffix(".lua")
    for path in resources.files("django_redis_locks.core").joinpath("scripts").iterdir()
    if path.name.endswith(".lua")
)
# Redis commands whose first argument is a key.
KEY_COMMANDS = [
    "GET",
    "SET",
    "DEL",
    "EXISTS",
    "HGET",
    "HSET",
    "HDEL",
    "HGETALL",
    "HINCRBY",
    "PTTL",
    "PEXPIRE",
    "EXPIRE",
    "INCR",
    "ZADD",
    "ZREM",
    "ZRANGE",
    "ZREMRANGEBYSCORE",
    "ZCARD",
    "ZSCORE",
    "ZRANK",
    "LPUSH",
    "RPUSH",
    "LPOP",
    "RPOP",
]


def test_there_are_scripts() -> None:
    assert {"lock_acquire", "lock_release", "lock_extend", "lock_state"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_header_names_keys_argv_and_reply(name: str) -> None:
    source = load(name).source
    header = "\n".join(line for line in source.splitlines() if line.startswith("--"))
    assert header.startswith(f"-- {name}:")
    assert "KEYS[1]" in header and "Reply:" in header
    used_keys = set(re.findall(r"KEYS\[(\d+)\]", source))
    used_args = set(re.findall(r"ARGV\[(\d+)\]", source))
    for index in used_keys:
        assert f"-- KEYS[{index}]" in header, f"KEYS[{index}] is used but not documented"
    for index in used_args:
        assert f"-- ARGV[{index}]" in header, f"ARGV[{index}] is used but not documented"


@pytest.mark.parametrize("name", SCRIPTS)
def test_scripts_touch_only_keys_they_were_given(name: str) -> None:
    code = "\n".join(
        line for line in load(name).source.splitlines() if not line.lstrip().startswith("--")
    )
    calls = re.findall(r"redis\.call\('(\w+)',\s*([^,)]+)", code)
    assert calls
    for command, first in calls:
        if command.upper() in KEY_COMMANDS:
            assert re.fullmatch(r"KEYS\[\d+\]", first.strip()), f"{command} on {first}"
    assert "KEYS'" not in code and "'SCAN'" not in code
    assert "os.time" not in code  # the clock comes from TIME


def test_script_flush_between_calls_is_transparent(backend: Backend, redis_client) -> None:
    lock = Lock("flushed", client=backend, timeout=5, auto_renew=True)
    other = Lock("flushed", client=backend, timeout=5, blocking=False)
    redis_client.script_flush()
    assert lock.acquire()
    redis_client.script_flush()
    assert not other.acquire()
    redis_client.script_flush()
    assert lock.extend(1) > 5
    redis_client.script_flush()
    assert lock.owned()
    redis_client.script_flush()
    lock.release()


def test_script_flush_in_a_pipeline_reruns_only_what_did_not_run(
    backend: Backend, redis_client
) -> None:
    keys = backend.keys.lock("piped")
    acquire = protocol.acquire_call(keys, "tok", 5000, "{}")
    redis_client.script_load(load("lock_acquire").source)
    redis_client.script_flush()
    replies = run_many(redis_client, [acquire, protocol.state_call(keys, "tok")])
    acquired = protocol.decode_acquire(replies[0])
    assert isinstance(acquired, protocol.Acquired)
    assert acquired.fence > 0
    assert protocol.decode_state(replies[1]).owned


def test_script_flush_is_transparent_for_asyncio(redis_server, namespace: str) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url, socket_timeout=5)
        lock = Lock("flushed-async", client=Backend(client, namespace=namespace), timeout=5)
        await client.script_flush()
        assert await lock.aacquire()
        await client.script_flush()
        assert await lock.aowned()
        await client.script_flush()
        await lock.arelease()
        await client.aclose()
        lock.backend.client.close()

    asyncio.run(main())

"""The Lua scripts: headers, key discipline, EVALSHA with transparent reload on NOSCRIPT."""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
from importlib import resources
from importlib.resources.abc import Traversable

import pytest
import redis

from django_redis_locks import Lock
from django_redis_locks.core import Backend
from django_redis_locks.core.protocol import lock_calls as protocol
from django_redis_locks.core.protocol import replies, scripting
from django_redis_locks.core.protocol.constants import RECENT_RELEASES
from django_redis_locks.core.protocol.scripting import load, run_many
from tests.harness.acl import unrestricted_url

SCRIPTS = sorted(
    path.name.removesuffix(".lua")
    for path in resources.files("django_redis_locks.core.protocol").joinpath("scripts").iterdir()
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
    "ZRANGEBYSCORE",
    "ZRANGEBYLEX",
    "ZCOUNT",
    "HMGET",
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


LIBRARIES = sorted(
    path.name.removesuffix(".lua")
    for path in resources.files("django_redis_locks.core.protocol")
    .joinpath("scripts", "lib")
    .iterdir()
    if path.name.endswith(".lua")
)


def _code(source: str) -> str:
    return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("--"))


def _raw(*parts: str) -> str:
    return _package_dir(*parts).read_text()


def _package_dir(*parts: str) -> Traversable:
    return resources.files("django_redis_locks.core.protocol").joinpath("scripts", *parts)


def _library_functions() -> dict[str, list[str]]:
    """Each library function's parameters."""
    functions = {}
    for library in LIBRARIES:
        for function, params in re.findall(
            r"local function (\w+)\(([^)]*)\)", _raw("lib", f"{library}.lua")
        ):
            functions[function] = [p.strip() for p in params.split(",")]
    return functions


@pytest.mark.parametrize("name", SCRIPTS)
def test_scripts_touch_only_keys_they_were_given(name: str) -> None:
    """Commands name keys only through KEYS (or a library function's ``*_key`` parameter, and
    every call of a library function passes KEYS entries there)."""
    code = _code(load(name).source)
    calls = re.findall(r"redis\.call\('(\w+)',\s*([^,)]+)", code)
    assert calls
    for command, first in calls:
        if command.upper() in KEY_COMMANDS:
            assert re.fullmatch(r"KEYS\[[\w +-]+\]|\w+_key", first.strip()), f"{command} on {first}"
    own = _code(_raw(f"{name}.lua"))
    assert not re.search(r"\b\w+_key\b", own), "key parameters belong to the libraries"
    for function, params in _library_functions().items():
        for call in re.findall(rf"\b{function}\(([^)]*)\)", own):
            args = [a.strip() for a in call.split(",")]
            for param, arg in zip(params, args, strict=False):  # key parameters come first
                if param.endswith("_key"):
                    assert re.fullmatch(r"KEYS\[[\w +-]+\]", arg), f"{function}({param}={arg})"
    assert "KEYS'" not in code and "'SCAN'" not in code
    assert "os.time" not in code  # the clock comes from TIME


def test_library_functions_name_their_keys() -> None:
    """Inside libraries, keys come only from ``*_key`` parameters, never from KEYS."""
    assert LIBRARIES
    for library in LIBRARIES:
        code = _code(_raw("lib", f"{library}.lua"))
        assert "KEYS" not in code, library
        for command, first in re.findall(r"redis\.call\('(\w+)',\s*([^,)]+)", code):
            if command.upper() in KEY_COMMANDS:
                assert first.strip().endswith("_key"), f"{library}: {command} on {first}"


def test_each_script_is_read_from_the_package_once(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[tuple[str, ...]] = []
    real = scripting._read

    def counted(*parts: str) -> str:
        reads.append(parts)
        return real(*parts)

    monkeypatch.setattr(scripting, "_read", counted)
    monkeypatch.setattr(scripting, "_CACHE", {})
    first = load("lock_acquire")
    assert load("lock_acquire") is first
    # The first load reads every script, and each library once (so that a later call, a
    # release, never reads a file: see test_interruptions.py).
    libraries = sorted(("lib", p.name) for p in _package_dir("lib").iterdir())
    scripts = sorted((p.name,) for p in _package_dir().iterdir() if p.name.endswith(".lua"))
    expected: list[tuple[str, ...]] = [*libraries, *scripts]
    assert sorted(reads) == sorted(expected)
    reads.clear()
    assert load("lock_release") is load("lock_release") and not reads
    assert "\n-- @include" not in first.source and "local function lock_grant" in first.source
    assert first.sha == hashlib.sha1(first.source.encode(), usedforsecurity=False).hexdigest()


@pytest.mark.parametrize("name", SCRIPTS)
def test_scripts_that_keep_time_take_it_from_the_server(name: str) -> None:
    code = _code(load(name).source)
    if "now_ms" in code or "now_us" in code:
        assert "redis.call('TIME')" in code, name
    assert not re.search(r"\bos\.(time|clock)\b", code), name


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
    results = run_many(redis_client, [acquire, protocol.state_call(keys, "tok")])
    acquired = protocol.decode_acquire(results[0])
    assert isinstance(acquired, replies.Acquired)
    assert acquired.fence > 0
    assert protocol.decode_state(results[1]).owned


def test_script_flush_is_transparent_for_asyncio(redis_server, namespace: str) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url, socket_timeout=5)
        admin = redis.asyncio.Redis.from_url(unrestricted_url(redis_server.url), socket_timeout=5)
        lock = Lock("flushed-async", client=Backend(client, namespace=namespace), timeout=5)
        await admin.script_flush()
        assert await lock.aacquire()
        await admin.script_flush()
        assert await lock.aowned()
        await admin.script_flush()
        await lock.arelease()
        await client.aclose()
        await admin.aclose()
        lock.backend.client.close()

    asyncio.run(main())


def _gone_with_model(entries: list[str], hid: str, entry: str) -> list[str]:
    """What lib/gone's list of recent releases becomes: the new entry first, an older entry of
    the same hold dropped, at most RECENT_RELEASES entries."""
    return ([entry] + [old for old in entries if old[1:17] != hid])[:RECENT_RELEASES]


def test_the_list_of_recent_releases_keeps_the_newest_and_one_entry_per_hold(
    redis_client,
) -> None:
    """lib/gone's gone_with, on lists of every length (its fast path when the hold has no
    entry yet, its rebuild when it has one), against a model of what the list must hold."""
    source = scripting._expand("-- @include gone\nreturn gone_with(ARGV[1], ARGV[2], ARGV[3])")
    gone_with = redis_client.register_script(source)
    rng = random.Random(15)
    hids = [f"{n:016x}" for n in range(24)]
    for case in range(400):
        size = case % 20
        entries: list[str] = []
        for hid in rng.sample(hids, size):
            entries.append(f"R{hid}" if rng.random() < 0.7 else f"X{hid}.{rng.getrandbits(32):08x}")
        hid = rng.choice(hids)
        entry = f"R{hid}" if case % 3 else f"X{hid}.{rng.getrandbits(32):08x}"
        given = " ".join(entries)
        result = gone_with(keys=[], args=[given, hid, entry]).decode()
        assert result.split(" ") == _gone_with_model(entries, hid, entry), (given, hid, entry)
    assert gone_with(keys=[], args=["", "0" * 16, "R" + "0" * 16]) == b"R" + b"0" * 16

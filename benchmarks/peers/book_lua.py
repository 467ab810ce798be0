"""The Lua lock of *Redis in Action*, section 11.2.2 (listings 11.5 and 11.6).

Acquire runs ``EXISTS`` + ``SETEX`` in one script and, when blocking, sleeps 1 ms between
tries; release compares the identifier and deletes in one script. Written from the listings;
the only change is a monotonic clock for the acquire deadline instead of ``time.time()``.
"""

from __future__ import annotations

import math
import time
import uuid

import redis
from redis.commands.core import Script

from benchmarks.registry import Impl, register

__all__ = ["BookLuaLock", "acquire_lock_with_timeout", "release_lock"]

# Listing 11.5: set the key with the identifier and an expiry, only if it does not exist.
ACQUIRE_LUA = """
if redis.call('exists', KEYS[1]) == 0 then
    return redis.call('setex', KEYS[1], unpack(ARGV))
end
"""

# Listing 11.6: delete the key only if it still holds our identifier.
RELEASE_LUA = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1]) or true
end
"""


def acquire_lock_with_timeout(
    conn: redis.Redis,
    acquire_script: Script,
    lockname: str,
    acquire_timeout: float = 10,
    lock_timeout: float = 10,
) -> str | None:
    """Listing 11.5: the identifier if the lock was taken within ``acquire_timeout``, else None.

    ``acquire_timeout=0`` makes exactly one try (the non-blocking form).
    """
    identifier = str(uuid.uuid4())
    lockname = "lock:" + lockname
    whole_seconds = math.ceil(lock_timeout)
    acquired = False
    end = time.monotonic() + acquire_timeout
    while True:
        reply = acquire_script(keys=[lockname], args=[whole_seconds, identifier], client=conn)
        acquired = reply in (b"OK", "OK")
        if acquired or time.monotonic() >= end:
            break
        time.sleep(0.001)
    return identifier if acquired else None


def release_lock(conn: redis.Redis, release_script: Script, lockname: str, identifier: str) -> bool:
    """Listing 11.6: True if the lock was still ours and is now deleted."""
    lockname = "lock:" + lockname
    return bool(release_script(keys=[lockname], args=[identifier], client=conn))


class BookLuaLock:
    """The two functions above behind the benchmark adapter interface."""

    def __init__(self, client: redis.Redis, name: str, ttl: float) -> None:
        self._client = client
        self._name = name
        self._ttl = ttl
        self._acquire = client.register_script(ACQUIRE_LUA)
        self._release = client.register_script(RELEASE_LUA)
        self._identifier: str | None = None

    def acquire(self, blocking: bool, timeout: float | None = None) -> bool:
        wait = 0.0 if not blocking else (10.0 if timeout is None else timeout)
        self._identifier = acquire_lock_with_timeout(
            self._client, self._acquire, self._name, wait, self._ttl
        )
        return self._identifier is not None

    def release(self) -> None:
        if self._identifier is None:
            raise RuntimeError("release without a hold")
        release_lock(self._client, self._release, self._name, self._identifier)
        self._identifier = None

    def close(self) -> None:
        pass


register(
    Impl(
        name="book-lua",
        label="Redis in Action Lua lock",
        kind="lock",
        factory=BookLuaLock,
        waits_by="sleep 1 ms between tries",
        note="listings 11.5/11.6: EXISTS+SETEX script, GET+DEL script",
    )
)

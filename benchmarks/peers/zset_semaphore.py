"""A plain counting semaphore on one sorted set, on server time: the least a correct one does.

Acquire is one script: read ``TIME``, drop holders whose expiry has passed, and if fewer than
``limit`` remain add the caller's token scored by its expiry; release is one ``ZREM``. It
keeps the limit and needs no client clock, and that is all: no order among callers (a
blocked caller retries every millisecond, and whoever retries first after a release wins),
no holder metadata, no listing, no wake-ups. The semaphore's counterpart of the lock floor
(``SET NX PX`` + compare-and-delete): what a cycle costs when nothing else is promised.
"""

from __future__ import annotations

import secrets
import time

import redis
from redis.commands.core import Script

from benchmarks.registry import register, semaphore

__all__ = ["ZsetSemaphore"]

ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
end
return 0
"""

RETRY_SLEEP = 0.001


class ZsetSemaphore:
    """``acquire``: the script above; ``release``: ``ZREM``; blocked callers retry every 1 ms."""

    def __init__(self, client: redis.Redis, name: str, ttl: float, limit: int) -> None:
        self._client = client
        self._key = "zsem:" + name
        self._limit = limit
        self._ttl_ms = max(1, round(ttl * 1000))
        self._acquire: Script = client.register_script(ACQUIRE)
        self._token = ""

    def acquire(self, blocking: bool, timeout: float | None = None) -> bool:
        end = time.monotonic() + (10.0 if timeout is None else timeout)
        token = secrets.token_hex(16)
        while True:
            if self._acquire(
                keys=[self._key], args=[self._limit, self._ttl_ms, token], client=self._client
            ):
                self._token = token
                return True
            if not blocking or time.monotonic() >= end:
                return False
            time.sleep(RETRY_SLEEP)

    def release(self) -> None:
        self._client.zrem(self._key, self._token)

    def close(self) -> None:
        pass


register(
    semaphore(
        "zset-sem",
        "plain ZSET semaphore, server time",
        ZsetSemaphore,
        waits_by="retry every 1 ms",
        note="one script (TIME, ZREMRANGEBYSCORE, ZCARD, ZADD, PEXPIRE); release is one ZREM",
        guarantees="server time; the limit holds; no order among callers, no metadata, no listing",
    )
)

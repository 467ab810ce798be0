"""Reference floors: the least work a lock cycle can cost, to express the others as ratios.

- ``ping2``: two ``PING`` round trips per cycle, the cost of any two-command cycle.
- ``floor``: ``SET key token NX PX ttl`` to acquire and a two-line compare-and-delete script
  to release: the cheapest correct Redis lock, with no metadata, fencing or waiting.
"""

from __future__ import annotations

import secrets

import redis
from redis.commands.core import Script

from benchmarks.registry import CYCLE, TRY, Impl, register

__all__ = ["FloorLock", "Ping2"]

COMPARE_AND_DELETE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""


class Ping2:
    """Two PINGs per cycle; always "acquires"."""

    def __init__(self, client: redis.Redis, name: str, ttl: float) -> None:
        self._client = client

    def acquire(self, blocking: bool, timeout: float | None = None) -> bool:
        self._client.ping()
        return True

    def release(self) -> None:
        self._client.ping()

    def close(self) -> None:
        pass


class FloorLock:
    """``SET NX PX`` + compare-and-delete; a try never waits."""

    def __init__(self, client: redis.Redis, name: str, ttl: float) -> None:
        self._client = client
        self._key = f"floor:{name}"
        self._ttl_ms = max(1, round(ttl * 1000))
        self._release: Script = client.register_script(COMPARE_AND_DELETE)
        self._token = ""

    def acquire(self, blocking: bool, timeout: float | None = None) -> bool:
        token = secrets.token_hex(16)
        if self._client.set(self._key, token, nx=True, px=self._ttl_ms):
            self._token = token
            return True
        return False

    def release(self) -> None:
        self._release(keys=[self._key], args=[self._token], client=self._client)

    def close(self) -> None:
        pass


register(
    Impl(
        name="ping2",
        label="floor: 2 x PING",
        kind="floor",
        factory=Ping2,
        capabilities=frozenset({CYCLE}),
        note="two round trips, no lock at all",
    )
)
register(
    Impl(
        name="floor",
        label="floor: SET NX PX + compare-and-delete",
        kind="floor",
        factory=FloorLock,
        capabilities=frozenset({CYCLE, TRY}),
        note="the cheapest correct lock cycle; tries never wait",
    )
)

"""Probes of a lock's state in Redis, for tests: held or not, and for how long.

A lock's hash outlives its hold (it keeps the fence for a while), so "held" means: a token
is set and its ``expires`` (server time, ms) is still ahead of the server's clock.
"""

from __future__ import annotations

from typing import Any


def held_ttl_ms(client: Any, key: str | bytes) -> int | None:
    """Milliseconds left on the hold stored at ``key``; None when nobody holds it."""
    token, expires = client.hmget(key, "token", "expires")
    if token is None or expires is None:
        return None
    seconds, micros = client.time()
    left = int(expires) - (int(seconds) * 1000 + int(micros) // 1000)
    return left if left > 0 else None


def is_held(client: Any, key: str | bytes) -> bool:
    return held_ttl_ms(client, key) is not None


def only_recent_releases(client: Any, key: str | bytes) -> bool:
    """Whether the hash at ``key`` keeps nothing but the record of recent releases: what a
    semaphore leaves after its last holder released, for a while, so that a resent release
    is recognised."""
    fields = {f.decode() if isinstance(f, bytes) else f for f in client.hkeys(key)}
    return fields == {"gone"}

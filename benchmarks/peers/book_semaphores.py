"""The counting semaphores of *Redis in Action*: the fair one of section 6.3.2 (listings 6.14
and 6.15) and the Lua one of section 11.2.3 (listing 11.7, released with listing 6.13).

Both score holders by the acquiring client's ``time.time()`` and drop holders older than the
timeout by the clock of whoever acquires next; neither has a blocking acquire (the book's
callers retry), so blocked callers here retry every millisecond like the book's Lua lock
(listing 11.5). Written from the listings; the only changes are redis-py 3+'s ``zadd``
mapping argument and a monotonic clock for the retry deadline.

- 6.3.2 ``acquire_fair_semaphore``: a holders ZSET (identifier -> client time) and an owners
  ZSET (identifier -> counter from ``INCR``); a caller holds a slot if its *counter's* rank is
  below the limit, so a client whose clock runs ahead cannot take a slot by its timestamp.
  Two ``MULTI``/``EXEC`` round trips per try, a third to clean up after a failed one. The book
  itself (6.3.5) shows the race left in it: a caller that drew the lower counter but ranks
  itself later takes the slot of one that already ranked itself in, which does not know, so
  the limit can be exceeded until that holder's next refresh; its fix wraps the acquire in
  a lock (one more lock acquire and release per try).
- 11.2.3 ``acquire_semaphore`` in Lua: prune by client time, ``ZCARD < limit`` then ``ZADD``,
  in one script, which the book calls "completely fair": atomic, so the limit holds and no
  clock can steal a slot. Expiry is still by client clocks (a host whose clock is behind
  ages its holders early), and there is no order among callers who retry.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import redis
from redis.commands.core import Script

from benchmarks.registry import register, semaphore

__all__ = [
    "BookFairSemaphore",
    "BookLuaSemaphore",
    "acquire_fair_semaphore",
    "acquire_semaphore_lua",
    "release_fair_semaphore",
    "release_semaphore",
]

#: Seconds between tries of a blocked caller (as the book's Lua lock, listing 11.5).
RETRY_SLEEP = 0.001


def acquire_fair_semaphore(
    conn: redis.Redis, semname: str, limit: int, timeout: float = 10
) -> str | None:
    """Listing 6.14: the identifier if a slot was taken, else None."""
    identifier = str(uuid.uuid4())
    czset = semname + ":owner"
    ctr = semname + ":counter"

    now = time.time()
    pipeline = conn.pipeline(True)
    pipeline.zremrangebyscore(semname, "-inf", now - timeout)  # time out old holders
    pipeline.zinterstore(czset, {czset: 1, semname: 0})  # ... and their owner entries
    pipeline.incr(ctr)
    counter = pipeline.execute()[-1]

    pipeline.zadd(semname, {identifier: now})
    pipeline.zadd(czset, {identifier: counter})
    pipeline.zrank(czset, identifier)
    if pipeline.execute()[-1] < limit:
        return identifier

    pipeline.zrem(semname, identifier)  # no slot: take our entries back
    pipeline.zrem(czset, identifier)
    pipeline.execute()
    return None


def release_fair_semaphore(conn: redis.Redis, semname: str, identifier: str) -> bool:
    """Listing 6.15: True if the slot was still ours."""
    pipeline = conn.pipeline(True)
    pipeline.zrem(semname, identifier)
    pipeline.zrem(semname + ":owner", identifier)
    return bool(pipeline.execute()[0])


# Listing 11.7: prune by the caller's clock, then take a slot if one is free.
ACQUIRE_SEMAPHORE_LUA = """
redis.call('zremrangebyscore', KEYS[1], '-inf', ARGV[1])
if redis.call('zcard', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('zadd', KEYS[1], ARGV[3], ARGV[4])
    return ARGV[4]
end
"""


def acquire_semaphore_lua(
    conn: redis.Redis, script: Script, semname: str, limit: int, timeout: float = 10
) -> str | None:
    """Listing 11.7: the identifier if a slot was taken, else None."""
    now = time.time()
    reply = script(keys=[semname], args=[now - timeout, limit, now, str(uuid.uuid4())], client=conn)
    if reply is None:
        return None
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def release_semaphore(conn: redis.Redis, semname: str, identifier: str) -> bool:
    """Listing 6.13 (11.2.3 keeps it): True if the slot was still ours."""
    return bool(conn.zrem(semname, identifier))


class _Retrying:
    """A book semaphore behind the adapter interface: blocked callers retry every 1 ms."""

    def __init__(self, try_once: Callable[[], str | None], release: Callable[[str], bool]) -> None:
        self._try_once = try_once
        self._release = release
        self._identifier: str | None = None

    def acquire(self, blocking: bool, timeout: float | None = None) -> bool:
        end = time.monotonic() + (10.0 if timeout is None else timeout)
        while True:
            self._identifier = self._try_once()
            if self._identifier is not None:
                return True
            if not blocking or time.monotonic() >= end:
                return False
            time.sleep(RETRY_SLEEP)

    def release(self) -> None:
        if self._identifier is None:
            raise RuntimeError("release without a slot")
        self._release(self._identifier)
        self._identifier = None

    def close(self) -> None:
        pass


class BookFairSemaphore(_Retrying):
    """Listings 6.14 / 6.15 (section 6.3.2)."""

    def __init__(self, client: redis.Redis, name: str, ttl: float, limit: int) -> None:
        semname = "semaphore:" + name
        super().__init__(
            lambda: acquire_fair_semaphore(client, semname, limit, ttl),
            lambda identifier: release_fair_semaphore(client, semname, identifier),
        )


class BookLuaSemaphore(_Retrying):
    """Listing 11.7 with listing 6.13's release (section 11.2.3)."""

    def __init__(self, client: redis.Redis, name: str, ttl: float, limit: int) -> None:
        semname = "semaphore:" + name
        script = client.register_script(ACQUIRE_SEMAPHORE_LUA)
        super().__init__(
            lambda: acquire_semaphore_lua(client, script, semname, limit, ttl),
            lambda identifier: release_semaphore(client, semname, identifier),
        )


register(
    semaphore(
        "book-fair-sem",
        "Redis in Action fair semaphore (6.3.2)",
        BookFairSemaphore,
        waits_by="retry every 1 ms",
        note="listings 6.14/6.15: two MULTI/EXEC round trips per try (three when it fails), "
        "one to release",
        guarantees="client clocks for expiry; slots ranked by an INCR counter, so a fast "
        "clock cannot steal one; no order among retrying callers; the race of 6.3.5 can "
        "exceed the limit (the book's fix adds a lock)",
    )
)
register(
    semaphore(
        "book-lua-sem",
        "Redis in Action Lua semaphore (11.2.3)",
        BookLuaSemaphore,
        waits_by="retry every 1 ms",
        note="listing 11.7: one script per try; release is one ZREM (listing 6.13)",
        guarantees="client clocks for expiry; the limit holds (one atomic script); "
        "no order among retrying callers",
    )
)

"""What an uncontended cycle costs the server, counted exactly (``INFO commandstats`` on a
private server), and the lazy registry that makes it cheap: a name in use is listed once
every few minutes, not on every acquire and release, and listings skip the free names that
the registry still names (lib/registry.lua)."""

from __future__ import annotations

from typing import Any

import redis

from django_redis_locks.core import Backend, Lock, Semaphore
from django_redis_locks.core.protocol.constants import REGISTRY_AHEAD_MS, RETENTION_MS
from django_redis_locks.inspection import list_locks, list_semaphores
from tests.harness.plugin import MakeServer
from tests.helpers import server_ms

CYCLES = 200
#: The commands the scripts run per uncontended cycle (acquire and release), at most.
LOCK_COMMANDS = 8  # TIME, HMGET, HSET, PEXPIRE; TIME, HMGET, HDEL, HSET
# TIME, HMGET, ZRANGE, ZADD, HSET, PEXPIRE; TIME, HMGET, ZRANGE, DEL, HSET, PEXPIRE
SEMAPHORE_COMMANDS = 12


def _commands(client: redis.Redis) -> dict[str, int]:
    """Calls per command since the last reset, without EVALSHA and the bookkeeping."""
    stats = client.info("commandstats")
    skip = {"evalsha", "config|resetstat", "info", "config", "ping", "client|setinfo"}
    return {
        name.removeprefix("cmdstat_"): int(value["calls"])
        for name, value in stats.items()
        if name.removeprefix("cmdstat_") not in skip
    }


def _per_cycle(client: redis.Redis, primitive: Lock | Semaphore) -> tuple[float, dict[str, int]]:
    assert primitive.acquire(blocking=False)  # (the first cycle lists the name)
    primitive.release()
    client.config_resetstat()
    for _ in range(CYCLES):
        assert primitive.acquire(blocking=False)
        primitive.release()
    counted = _commands(client)
    return sum(counted.values()) / CYCLES, counted


def test_an_uncontended_cycle_runs_at_most_8_commands_for_a_lock_and_12_for_a_semaphore(
    make_server: MakeServer,
) -> None:
    """Counted, not timed: 18 and 29 before the registry was kept lazily, the queue flagged
    and a lock's release cleared in place; 17 for a semaphore before one look at its holders
    did for three reads and its info hash's expiry was kept with its registry entry; no
    registry command at all in steady use."""
    server = make_server()
    with server.client(socket_timeout=5) as client:
        backend = Backend(client, namespace="lean")
        per_lock, lock_counts = _per_cycle(client, Lock("cycle", client=backend, timeout=30))
        assert per_lock <= LOCK_COMMANDS, lock_counts
        semaphore = Semaphore("cycle", 3, client=backend, timeout=30)
        per_semaphore, semaphore_counts = _per_cycle(client, semaphore)
        assert per_semaphore <= SEMAPHORE_COMMANDS, semaphore_counts
        for counted in (lock_counts, semaphore_counts):
            assert "pttl" not in counted and "zrange" in semaphore_counts
            assert counted.get("zadd", 0) <= CYCLES  # (the semaphore's holder, not the registry)
        assert "zrem" not in semaphore_counts  # (the last holder's slot goes with its key)


def test_listings_skip_the_free_names_the_registry_still_holds_and_fill_their_pages(
    backend: Backend,
) -> None:
    """60 released names and 7 held ones in one registry: pages of 3 hold 3 held names each
    until the last, and every held name is listed exactly once."""
    for index in range(60):
        released = Lock(f"page:free:{index}", client=backend, timeout=30)
        assert released.acquire()
        released.release()
    held = [Lock(f"page:held:{index}", client=backend, timeout=30) for index in range(7)]
    for lock in held:
        assert lock.acquire()
    seen: list[str] = []
    sizes: list[int] = []
    cursor = None
    while True:
        page = list_locks("page:", cursor=cursor, count=3, client=backend)
        seen += [info.name for info in page.items]
        sizes.append(len(page.items))
        cursor = page.cursor
        if cursor is None:
            break
    assert sorted(seen) == sorted(lock.name for lock in held)
    assert sizes[:2] == [3, 3] and sum(sizes) == 7
    for lock in held:
        lock.release()


def test_an_extended_hold_stays_listed_past_its_first_entry(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """An extend past what the entry covers lists the name again (lock_extend), and so does a
    semaphore holder with a longer TTL than the entry covers: a listing never misses a live
    hold however long it is kept."""
    lock = Lock("long:lock", client=backend, timeout=1)
    assert lock.acquire()
    lock.extend(3600, replace=True)
    short = Semaphore("long:sem", 2, client=backend, timeout=1)
    assert short.acquire()
    semaphore = Semaphore("long:sem", 2, client=backend, timeout=3600)
    assert semaphore.acquire()
    short.release()
    now_ms = server_ms(redis_client)
    for kept, key_life in _entries(backend, redis_client, "long"):
        assert kept >= now_ms + 3_600_000 and key_life >= kept - now_ms
    assert [info.name for info in list_locks("long:", client=backend).items] == ["long:lock"]
    assert [info.name for info in list_semaphores("long:", client=backend).items] == ["long:sem"]
    lock.release()
    semaphore.release()


def test_a_long_hold_released_early_leaves_the_registry_within_minutes(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """An hour-long hold lists its name for over an hour; released at once, the entry is
    trimmed to REGISTRY_AHEAD_MS past what is left of the name (the footprint's bound)."""
    for make in (
        lambda: Lock("hour:lock", client=backend, timeout=3600),
        lambda: Semaphore("hour:sem", 2, client=backend, timeout=3600),
    ):
        primitive: Any = make()
        assert primitive.acquire()
        primitive.release()
    now_ms = server_ms(redis_client)
    for kept, key_life in _entries(backend, redis_client, "hour"):
        assert kept <= now_ms + RETENTION_MS + REGISTRY_AHEAD_MS + 50, kept - now_ms
        assert key_life <= RETENTION_MS + REGISTRY_AHEAD_MS + 3_000
    # What is left of the lock itself goes with the retention, not with the hour it had left.
    assert 0 < redis_client.pttl(backend.keys.lock("hour:lock").lock) <= RETENTION_MS


def test_a_hold_shortened_then_released_or_abandoned_leaves_the_registry_soon_after(
    backend: Backend, redis_client: redis.Redis
) -> None:
    """An entry is kept at most REGISTRY_AHEAD_MS past its name's keys, also after a long hold
    was cut short with an extend: released, the name leaves the registry within 8 minutes;
    abandoned (its holder died), within REGISTRY_AHEAD_MS of its hash (lib/registry's
    registry_fit; both were longer before, up to the first TTL and 7 minutes)."""
    released = Lock("cut:lock", client=backend, timeout=180)
    assert released.acquire()
    released.extend(60, replace=True)
    released.release()
    dying = Lock("cut:dying", client=backend, timeout=3600)
    assert dying.acquire()
    dying.extend(1, replace=True)  # and never released
    now_ms = server_ms(redis_client)
    kept = _kept(backend, redis_client, "lock:cut:lock")
    assert kept <= now_ms + RETENTION_MS + 60_000 + REGISTRY_AHEAD_MS, kept - now_ms
    kept = _kept(backend, redis_client, "lock:cut:dying")
    hash_life = redis_client.pttl(backend.keys.lock("cut:dying").lock)
    assert kept <= now_ms + hash_life + REGISTRY_AHEAD_MS + 50, (kept - now_ms, hash_life)


def _kept(backend: Backend, client: redis.Redis, member: str) -> float:
    kind, _, name = member.partition(":")
    keys = backend.keys.lock(name) if kind == "lock" else backend.keys.semaphore(name)
    kept = client.zscore(keys.registry.expiry, member)
    assert kept is not None, f"{member} is not listed"
    return kept


def _entries(backend: Backend, client: redis.Redis, prefix: str) -> list[tuple[float, int]]:
    """Until when the registry keeps "<prefix>:lock" and "<prefix>:sem" (ms, server time),
    each with the remaining life of its registry's keys (ms; the longer of the two, which
    always get the same)."""
    found = []
    for member, registry in (
        (f"lock:{prefix}:lock", backend.keys.lock(f"{prefix}:lock").registry),
        (f"sem:{prefix}:sem", backend.keys.semaphore(f"{prefix}:sem").registry),
    ):
        kept = client.zscore(registry.expiry, member)
        assert kept is not None, f"{member} is not listed"
        lives = [int(client.pttl(key)) for key in (registry.names, registry.expiry)]
        assert abs(lives[0] - lives[1]) < 50, lives
        found.append((kept, max(lives)))
    return found

"""Key layout: every key of one primitive lives in one Redis Cluster slot, chosen by us.

A name is hashed into one of ``BUCKETS`` buckets and the bucket number is the key's hash tag::

    <ns>:{<bucket>}:lock:<name>     HASH   token, fence, acquired, expires, meta, recent releases
                                           (a released name keeps only its fence, recent
                                           releases and average hold, for RETENTION_MS)
    <ns>:{<bucket>}:lockq:<name>    ZSET   lock queue: token -> ticket (arrival order)
    <ns>:{<bucket>}:lockw:<name>    HASH   lock waiters: token -> "<ttl ms> <session> <slice ms>
                                           <channel> <meta>" (lib/lock's record)
    <ns>:{<bucket>}:lockl:<name>    ZSET   lock waiter leases: token -> expiry (ms)
    <ns>:{<bucket>}:sem:<name>      ZSET   semaphore holders: token -> expiry (ms)
    <ns>:{<bucket>}:semq:<name>     ZSET   semaphore queue: token -> ticket
    <ns>:{<bucket>}:semw:<name>     ZSET   semaphore waiter leases: token -> expiry (ms)
    <ns>:{<bucket>}:semi:<name>     HASH   semaphore limit, ticket counter, recent releases,
                                           h:<token> -> "<acquired ms> <ticket> <meta>",
                                           w:<token> -> "<ttl ms> <channel> <meta>"
                                           (lib/semaphore's records)
    <ns>:{<bucket>}:ticket:<name>   STRING a handed-off hold's ticket and the task it was
                                           handed to: "<task id or -> <ticket>" (tickets;
                                           written and read by the Django layer's unique
                                           tasks, never by a script), expiring with the hold
    <ns>:{<bucket>}:rerun:<name>    STRING "1": a unique task with on_conflict="reschedule"
                                           is to run once more when the run that holds the
                                           name ends (written and taken by the Django layer)
    <ns>:{<bucket>}:reg:names       ZSET   registry: "lock:<name>" / "sem:<name>" in name order
    <ns>:{<bucket>}:reg:expiry      ZSET   registry: member -> until when it is kept (ms),
                                           kept lazily (lib/registry): it may name a free
                                           lock or semaphore, which listings skip
    <ns>:{<bucket>}:hot             HASH   contention figures: member -> refused, queued,
                                           left, waits and holds over the last 5 and 60
                                           minutes (lib/hot; read by hot_figures.py),
                                           written only where a name is contended

Because the tag is the bucket and not the name, user input can neither choose a slot nor end
the tag early, and the per-bucket registry sits in the same slot as the keys it indexes, so
the scripts keep it atomically, on a single server and on Cluster alike. The name
is the last part of each key, after a fixed word per key kind, so distinct names always give
distinct keys.

Changing BUCKETS moves every key: it is part of the on-wire format.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass

from django_redis_locks.core.validation import check_namespace

from .constants import RETENTION_MS

__all__ = ["BUCKETS", "RETENTION_MS", "KeySpace", "LockKeys", "RegistryKeys", "SemaphoreKeys"]

#: Number of hash-tag buckets (and registry shards) per namespace.
BUCKETS = 256

#: Registry member prefixes, one per kind of primitive.
LOCK_KIND = "lock"
SEMAPHORE_KIND = "sem"


@dataclass(frozen=True, slots=True)
class RegistryKeys:
    """The keys one bucket's names share: the registry's two, and the contention figures."""

    names: str  # members in name order, for listings
    expiry: str  # member -> expiry, for pruning
    hot: str  # member -> contention figures (lib/hot)


@dataclass(frozen=True, slots=True)
class LockKeys:
    """The keys and strings one lock's scripts need."""

    lock: str
    queue: str
    waiters: str
    leases: str
    registry: RegistryKeys
    member: str  # registry member and wake-up message: "lock:<name>"

    @property
    def route(self) -> str:
        """The key that routes its commands (all of them share its slot)."""
        return self.lock

    @property
    def all(self) -> tuple[str, str, str, str, str, str, str]:
        """The keys of the acquire and release scripts, in script order."""
        return (
            self.lock,
            self.queue,
            self.waiters,
            self.leases,
            self.registry.names,
            self.registry.expiry,
            self.registry.hot,
        )


@dataclass(frozen=True, slots=True)
class SemaphoreKeys:
    """The keys and strings one semaphore's scripts need."""

    holders: str
    queue: str
    leases: str
    info: str
    registry: RegistryKeys
    member: str  # registry member and wake-up message: "sem:<name>"

    @property
    def route(self) -> str:
        """The key that routes its commands (all of them share its slot)."""
        return self.holders

    @property
    def state(self) -> tuple[str, str, str, str]:
        """The four keys of the semaphore itself, in script order."""
        return (self.holders, self.queue, self.leases, self.info)


@dataclass(frozen=True, slots=True)
class KeySpace:
    """Builds keys for one namespace. ``namespace`` is validated (ASCII, no braces)."""

    namespace: str

    def __post_init__(self) -> None:
        check_namespace(self.namespace)

    @property
    def channel(self) -> str:
        """The prefix of the pub/sub channels on which releases tell waiters: each process
        listens on ``<channel>:<process id>`` of its own (see :mod:`..runtime.wakeup`)."""
        return f"{self.namespace}:wake"

    @staticmethod
    def bucket(name: str) -> int:
        """The bucket of ``name`` (stable across processes, hosts and Python versions)."""
        return binascii.crc32(name.encode("utf-8")) % BUCKETS

    def prefix(self, bucket: int) -> str:
        """Key prefix of one bucket, hash tag included."""
        return f"{self.namespace}:{{{bucket}}}:"

    def registry(self, bucket: int) -> RegistryKeys:
        """The registry keys of one bucket."""
        prefix = self.prefix(bucket)
        return RegistryKeys(
            names=f"{prefix}reg:names", expiry=f"{prefix}reg:expiry", hot=f"{prefix}hot"
        )

    def lock(self, name: str) -> LockKeys:
        """Keys of the lock called ``name`` (already validated)."""
        bucket = self.bucket(name)
        prefix = self.prefix(bucket)
        return LockKeys(
            lock=f"{prefix}lock:{name}",
            queue=f"{prefix}lockq:{name}",
            waiters=f"{prefix}lockw:{name}",
            leases=f"{prefix}lockl:{name}",
            registry=self.registry(bucket),
            member=f"{LOCK_KIND}:{name}",
        )

    def ticket(self, name: str) -> str:
        """The key of lock ``name``'s handed-off ticket (see :mod:`.tickets`), in its slot."""
        return f"{self.prefix(self.bucket(name))}ticket:{name}"

    def rerun(self, name: str) -> str:
        """The key of the rerun asked of lock ``name``'s running task, in its slot."""
        return f"{self.prefix(self.bucket(name))}rerun:{name}"

    def semaphore(self, name: str) -> SemaphoreKeys:
        """Keys of the semaphore called ``name`` (already validated)."""
        bucket = self.bucket(name)
        prefix = self.prefix(bucket)
        return SemaphoreKeys(
            holders=f"{prefix}sem:{name}",
            queue=f"{prefix}semq:{name}",
            leases=f"{prefix}semw:{name}",
            info=f"{prefix}semi:{name}",
            registry=self.registry(bucket),
            member=f"{SEMAPHORE_KIND}:{name}",
        )

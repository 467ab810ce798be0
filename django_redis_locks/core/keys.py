"""Key layout: every key of one primitive lives in one Redis Cluster slot, chosen by us.

A name is hashed into one of ``BUCKETS`` buckets and the bucket number is the key's hash tag::

    <ns>:{<bucket>}:lock:<name>     HASH  token, fence, acquired, expires, meta; PX expiry
    <ns>:{<bucket>}:fence:<name>    STRING last fencing number handed out for <name>
    <ns>:{<bucket>}:wait:<name>     STRING "someone waits": release publishes only then
    <ns>:{<bucket>}:registry        ZSET  "<kind>:<name>" -> expiry (ms, server time)

Because the tag is the bucket and not the name, user input can neither choose a slot nor end
the tag early, and the per-bucket registry sits in the same slot as the keys it indexes, so
the scripts keep it up to date atomically, on a single server and on Cluster alike. The name
is the last part of each key, so distinct names always give distinct keys.

Changing BUCKETS moves every key: it is part of the on-wire format.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass

from .validation import check_namespace

__all__ = ["BUCKETS", "KeySpace", "LockKeys"]

#: Number of hash-tag buckets (and registry shards) per namespace.
BUCKETS = 256


@dataclass(frozen=True, slots=True)
class LockKeys:
    """The keys and strings one lock's scripts need."""

    lock: str
    fence: str
    wait: str
    registry: str
    member: str  # registry member and wake-up message: "lock:<name>"


@dataclass(frozen=True, slots=True)
class KeySpace:
    """Builds keys for one namespace. ``namespace`` is validated (ASCII, no braces)."""

    namespace: str

    def __post_init__(self) -> None:
        check_namespace(self.namespace)

    @property
    def channel(self) -> str:
        """The pub/sub channel on which releases announce themselves to waiters."""
        return f"{self.namespace}:wake"

    @staticmethod
    def bucket(name: str) -> int:
        """The bucket of ``name`` (stable across processes, hosts and Python versions)."""
        return binascii.crc32(name.encode("utf-8")) % BUCKETS

    def prefix(self, bucket: int) -> str:
        """Key prefix of one bucket, hash tag included."""
        return f"{self.namespace}:{{{bucket}}}:"

    def registry(self, bucket: int) -> str:
        """The registry ZSET of one bucket."""
        return f"{self.prefix(bucket)}registry"

    def lock(self, name: str) -> LockKeys:
        """Keys of the lock called ``name`` (already validated)."""
        prefix = self.prefix(self.bucket(name))
        return LockKeys(
            lock=f"{prefix}lock:{name}",
            fence=f"{prefix}fence:{name}",
            wait=f"{prefix}wait:{name}",
            registry=f"{prefix}registry",
            member=f"lock:{name}",
        )

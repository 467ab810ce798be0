"""What one script run changed: the state of its lock or semaphore read just before and just
after it, in the same pipeline (so at the same virtual instant, with nothing in between), for
the checks of invariants_script.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .world import _text

#: The scripts whose runs are probed (the ones that change a lock or semaphore).
PROBED = frozenset(
    ("lock_acquire", "lock_release", "lock_extend", "lock_take_over", "sem_acquire", "sem_release",
     "sem_refresh")
)  # fmt: skip

#: Run before and after a probed script (not through the prelude: it only reads). KEYS: the
#: primitive's hash (lock) or holders (sem), its queue, waiters (lock) or leases (sem), leases
#: (lock) or info (sem), the registry's names and expiry, the bucket's contention figures.
#: ARGV[1]: "lock" or "sem"; ARGV[2]: the registry member ("lock:<name>" / "sem:<name>").
PROBE = r"""
local out = {}
if ARGV[1] == 'lock' then
    out[1] = redis.call('HMGET', KEYS[1], 'token', 'expires', 'reserved', 'session',
        'slice_end', 'acquired', 'avg', 'fence', 'gone')
    out[2] = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
    out[3] = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
    out[4] = redis.call('HKEYS', KEYS[3])
    out[5] = {}
    out[7] = {}
    out[8] = {}
else
    out[1] = redis.call('HMGET', KEYS[4], 'limit', 'avg', 'gone')
    out[2] = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
    out[3] = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
    out[4] = redis.call('HKEYS', KEYS[4])
    out[5] = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
    out[7] = {}  -- each holder and when its record says it was granted ('': no record)
    out[8] = {}  -- each holder and its record's ticket ('': no record)
    for i = 1, #out[5], 2 do
        local record = redis.call('HGET', KEYS[4], 'h:' .. out[5][i]) or ''
        out[7][#out[7] + 1] = out[5][i]
        out[7][#out[7] + 1] = string.match(record, '^(%d+)') or ''
        out[8][#out[8] + 1] = out[5][i]
        out[8][#out[8] + 1] = string.match(record, '^%d+ (%d+)') or ''
    end
end
out[6] = redis.call('ZRANGE', KEYS[6], 0, -1, 'WITHSCORES')
out[9] = redis.call('HGET', KEYS[7], ARGV[2]) or ''
return out
"""


def probe_args(sha: str, call: Any) -> tuple[Any, ...] | None:
    """The EVALSHA arguments of PROBE (loaded as ``sha``) for a probed call, else None."""
    if call.script.name not in PROBED:
        return None
    prefix, rest = str(call.keys[0]).split("}:", 1)
    kind, name = rest.split(":", 1)
    parts = ("lockq", "lockw", "lockl") if kind == "lock" else ("semq", "semw", "semi")
    keys = [f"{prefix}}}:{part}:{name}" for part in (kind, *parts)]
    registry = (f"{prefix}}}:reg:names", f"{prefix}}}:reg:expiry", f"{prefix}}}:hot")
    return (sha, 7, *keys, *registry, kind, f"{kind}:{name}")


def _scores(values: list[Any]) -> dict[str, float]:
    return {_text(values[i]): float(values[i + 1]) for i in range(0, len(values), 2)}


@dataclass(frozen=True, slots=True)
class Seen:
    """One lock or semaphore as a probe read it. ``fields``: lock: token, expires, reserved,
    session, slice_end, acquired, avg, fence, gone; semaphore: limit, avg, gone ("" when
    absent). ``acquired``: each semaphore holder's grant time (ms, as text) from its ``h:``
    record ("": no record); ``tickets``: its ticket, likewise."""

    kind: str
    fields: tuple[str, ...]
    queue: dict[str, float]
    leases: dict[str, float]
    records: frozenset[str]  # lock: waiter tokens; semaphore: the info hash's field names
    holders: dict[str, float]  # semaphore holders (empty for a lock)
    registry: dict[str, float] = field(default_factory=dict)  # the bucket's expiry list
    acquired: dict[str, str] = field(default_factory=dict)  # semaphore holder -> grant ms
    tickets: dict[str, str] = field(default_factory=dict)  # semaphore holder -> ticket
    hot: str = ""  # the name's contention figures (lib/hot; "": none)

    @classmethod
    def decode(cls, kind: str, reply: list[Any]) -> Seen:
        fields = tuple("" if v is None else _text(v) for v in reply[0])
        records = frozenset(_text(n) for n in reply[3])
        queue, leases = _scores(reply[1]), _scores(reply[2])
        granted = [_text(v) for v in reply[6]]
        acquired = dict(zip(granted[::2], granted[1::2], strict=True))
        numbered = [_text(v) for v in reply[7]]
        tickets = dict(zip(numbered[::2], numbered[1::2], strict=True))
        holders, registry = _scores(reply[4]), _scores(reply[5])
        hot = _text(reply[8]) if len(reply) > 8 else ""
        return cls(kind, fields, queue, leases, records, holders, registry, acquired, tickets, hot)

    def grant_of(self, token: str) -> str:
        """The fence (lock) or ticket (semaphore) of ``token``'s grant ("": it holds none)."""
        if self.kind == "lock":
            return self.fields[7] if self.fields[0] == token else ""
        return self.tickets.get(token, "")

    @property
    def gone(self) -> list[str]:
        """The recent releases, newest first (lib/gone)."""
        return self.fields[-1].split()

    def holder(self, now_ms: int) -> str | None:
        """The live lock holder's token (a hand-over's too), or None."""
        token, expires = self.fields[0], self.fields[1]
        return token if token and float(expires or 0) > now_ms else None

    def live_holders(self, now_ms: int) -> set[str]:
        if self.kind == "lock":
            holder = self.holder(now_ms)
            return {holder} if holder else set()
        return {t for t, score in self.holders.items() if score > now_ms}

    def has_record(self, token: str) -> bool:
        return token in self.records if self.kind == "lock" else f"w:{token}" in self.records

    def live_waiters(self, now_ms: int) -> list[str]:
        """Queued tokens in ticket order whose lease runs and whose record is there."""
        return [t for t in self.in_order() if self.leases.get(t, 0) > now_ms and self.has_record(t)]

    def in_order(self) -> list[str]:
        """The queue as Redis ranks it: by ticket, then token."""
        return sorted(self.queue, key=lambda t: (self.queue[t], t))


@dataclass(frozen=True, slots=True)
class ScriptRun:
    """One run of a probed script: when, the call, what it replied, the state around it."""

    now_ms: int
    call: Any
    reply: Any
    before: Seen
    after: Seen
    published: tuple[str, ...] = ()  # its wake-up messages (without their channels)

    @classmethod
    def read(cls, now_ms: int, call: Any, replies: list[Any]) -> ScriptRun:
        """From a pipeline's replies: the probe before, the script's reply, the probe after,
        then what the script published ("<channel> <message>" each)."""
        kind = "lock" if call.script.name.startswith("lock") else "sem"
        before, after = Seen.decode(kind, replies[0]), Seen.decode(kind, replies[2])
        published = replies[3] if len(replies) > 3 and isinstance(replies[3], list) else []
        messages = tuple(_text(item).split(" ", 1)[1] for item in published)
        return cls(now_ms, call, replies[1], before, after, messages)

    @property
    def name(self) -> str:
        return str(self.call.script.name)

    def arg(self, index: int) -> str:
        return _text(self.call.args[index])

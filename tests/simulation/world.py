"""The server's state as the invariants read it: one snapshot per step, from the TICK script."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class KeyState:
    """One key: its type, its virtual expiry (None: none), its real PTTL, what was read."""

    key: str
    kind: str
    expiry_ms: int | None
    real_pttl: int
    #: hash: token, expires, fence, limit, reserved, q, l ("" if absent); the contention
    #: figures (<ns>:{b}:hot): member, figures, member, figures...
    fields: tuple[str, ...]
    scores: dict[str, float] = field(default_factory=dict)  # zset: member -> score
    names: frozenset[str] = frozenset()  # lockw / semi hash: its field names


@dataclass(slots=True)
class Snapshot:
    """Every key of the simulation's namespace at one virtual instant."""

    now_ms: int
    keys: dict[str, KeyState]

    def part(self, key: str) -> str:
        """The kind word of a protocol key: lock, lockq, sem, semi, reg:names..."""
        return _part(key)

    def lock(self, key: str) -> tuple[str, int, int] | None:
        """(token, expires ms, fence) of a lock hash that has a token, else None."""
        state = self.keys.get(key)
        if state is None or state.kind != "hash" or not state.fields[0]:
            return None
        token, expires, fence = state.fields[:3]
        return token, int(expires or 0), int(fence or 0)

    def holders(self, key: str) -> dict[str, float]:
        state = self.keys.get(key)
        return {} if state is None else state.scores


@lru_cache(maxsize=4096)
def _part(key: str) -> str:
    # every invariant asks this of every key at every step: the few key names a history
    # uses are worked out once
    rest = key.split("}:", 1)[1]
    return "reg:" + rest.split(":")[1] if rest.startswith("reg:") else rest.split(":")[0]


def decode(now_ms: int, reply: list[Any]) -> Snapshot:
    keys: dict[str, KeyState] = {}
    for entry in reply:
        key, kind, exp, pttl, data, names = entry
        key, kind, exp = _text(key), _text(kind), _text(exp)
        values = [_text(v) for v in data]
        scores: dict[str, float] = {}
        fields: tuple[str, ...] = ()
        if kind == "zset":
            scores = {values[i]: float(values[i + 1]) for i in range(0, len(values), 2)}
        else:
            fields = tuple(values)
        expiry = int(float(exp)) if exp else None
        names_read = frozenset(_text(n) for n in names)
        keys[key] = KeyState(key, kind, expiry, int(pttl), fields, scores, names_read)
    return Snapshot(now_ms, keys)

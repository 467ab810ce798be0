"""Invariants of the server's state alone (one snapshot): expiries, and the hygiene of the
protocol's keys (what one key lists, the keys that go with it list too).

Each check is a function named after the promise; it returns the violations it found.
"""

from __future__ import annotations

from django_redis_locks.core.protocol.constants import (
    HOT_LONG_MS,
    HOT_NAMES,
    HOT_SHORT_MS,
    REGISTRY_AHEAD_MS,
)
from django_redis_locks.core.protocol.keys import KeySpace

from .world import Snapshot

Found = list[tuple[str, str]]  # (invariant, detail)


def keys_expire(snap: Snapshot) -> Found:
    """Every key of the protocol has an expiry (in virtual time), and Redis itself never
    expires one (the simulation keeps them PERSISTed)."""
    found: Found = []
    for key, state in snap.keys.items():
        if state.expiry_ms is None:
            found.append(("keys_expire", f"{key} ({state.kind}) has no expiry"))
        elif state.real_pttl != -1:
            found.append(("keys_expire", f"{key} has a real TTL {state.real_pttl}"))
    return found


def keys_outlive_contents(snap: Snapshot) -> Found:
    """A key lives at least as long as what it holds: the lock hash its live hold, the
    holders key its live holders, the info key its holders and waiters, queue keys their
    leases, registry keys their entries."""
    found: Found = []
    now = snap.now_ms
    for key, state in snap.keys.items():
        part, need = snap.part(key), 0.0
        if part == "lock" and state.fields and state.fields[0]:
            need = float(state.fields[1] or 0)
        elif part in ("sem", "lockl", "semw", "reg:expiry"):
            need = max(state.scores.values(), default=0.0)
        if part == "semi":  # its h: records live as long as the holders, w: as the leases
            holders = snap.keys.get(key.replace(":semi:", ":sem:", 1))
            leases = snap.keys.get(key.replace(":semi:", ":semw:", 1))
            need = max(
                (*(holders.scores.values() if holders else ()),
                 *(leases.scores.values() if leases else ())),
                default=0.0,
            )  # fmt: skip
        if part in ("lockq", "lockw"):
            leases = snap.keys.get(key.replace(f":{part}:", ":lockl:", 1))
            need = max(leases.scores.values(), default=0.0) if leases else 0.0
        if part == "semq":
            leases = snap.keys.get(key.replace(":semq:", ":semw:", 1))
            need = max(leases.scores.values(), default=0.0) if leases else 0.0
        if part == "reg:names":
            other = snap.keys.get(key.replace("reg:names", "reg:expiry"))
            need = max(other.scores.values(), default=0.0) if other else 0.0
        if need > now and state.expiry_ms is not None and state.expiry_ms < need:
            found.append(
                (
                    "keys_outlive_contents",
                    f"{key} expires at t+{state.expiry_ms - now} ms, before what it holds "
                    f"(t+{need - now:.0f} ms)",
                )
            )
    return found


def registry_covers_holds(snap: Snapshot) -> Found:
    """Every live hold is listed in its bucket's registry until at least its expiry."""
    found: Found = []
    now = snap.now_ms
    for key, state in snap.keys.items():
        part = snap.part(key)
        if part == "lock" and state.fields and state.fields[0]:
            need, member = float(state.fields[1] or 0), "lock:" + key.split(":lock:", 1)[1]
        elif part == "sem":
            need, member = (
                max(state.scores.values(), default=0.0),
                "sem:" + key.split(":sem:", 1)[1],
            )
        else:
            continue
        if need <= now:
            continue
        listed = _listed_until(snap, key, member)
        if listed is None or listed < need:
            found.append(
                (
                    "registry_covers_holds",
                    f"{member} is held until t+{need - now:.0f} ms but listed "
                    f"{'not at all' if listed is None else f'until t+{listed - now:.0f} ms'}",
                )
            )
    return found


def _listed_until(snap: Snapshot, key: str, member: str) -> float | None:
    """Until when the registry of ``key``'s bucket keeps ``member`` (None: not listed)."""
    registry = snap.keys.get(key.split("}:", 1)[0] + "}:reg:expiry")
    return registry.scores.get(member) if registry else None


def nothing_left(snap: Snapshot) -> Found:
    """After every client stopped and every hold, lease and RETENTION_MS passed, nothing of
    the protocol is left in Redis."""
    return [
        ("nothing_left", f"{key} ({state.kind}) is still there") for key, state in snap.keys.items()
    ]


def _sibling(snap: Snapshot, key: str, part: str, other: str) -> dict[str, float]:
    return snap.holders(key.replace(f":{part}:", f":{other}:", 1))


def lock_queue_consistent(snap: Snapshot) -> Found:
    """A lock's queue, waiter records and leases list the same tokens: a waiter that leaves
    the queue (confirmed, gave up, or its lease ran out) leaves all three (lib/lock)."""
    found: Found = []
    for key in snap.keys:
        if snap.part(key) != "lockq":
            continue
        queued = set(snap.holders(key))
        leased = set(_sibling(snap, key, "lockq", "lockl"))
        records = snap.keys.get(key.replace(":lockq:", ":lockw:", 1))
        recorded = set(records.names) if records else set()
        if not queued == leased == recorded:
            found.append(("lock_queue_consistent", _differ(key, queued, leased, recorded)))
    for key in snap.keys:  # leases or records of a queue that is not there
        part = snap.part(key)
        if part in ("lockl", "lockw") and key.replace(f":{part}:", ":lockq:", 1) not in snap.keys:
            found.append(("lock_queue_consistent", f"{key} outlives its queue"))
    return found


def queue_flagged(snap: Snapshot) -> Found:
    """A lock or semaphore whose queue holds anyone, live or not yet pruned, says so in its
    hash (q; the semaphore's info hash): the scripts look at the queue only then, so a waiter
    unflagged would never be handed the lock or admitted (lib/lock, lib/semaphore)."""
    found: Found = []
    for key in snap.keys:
        part = snap.part(key)
        if part not in ("lockq", "semq"):
            continue
        own = ":lock:" if part == "lockq" else ":semi:"
        owner = snap.keys.get(key.replace(f":{part}:", own, 1))
        if owner is None or owner.fields[5] != "1":
            found.append(("queue_flagged", f"{key} has waiters; its{own}hash has no q"))
    return found


def _flagged_as_listed(snap: Snapshot) -> list[tuple[str, str, float, int | None]]:
    """Each lock hash and semaphore info hash whose l lies ahead: key, kind word, l, and the
    hash's own expiry (virtual ms)."""
    found = []
    for key, state in snap.keys.items():
        part = snap.part(key)
        if part in ("lock", "semi") and len(state.fields) >= 7 and state.fields[6]:
            listed = float(state.fields[6])
            if listed > snap.now_ms:
                found.append((key, part, listed, state.expiry_ms))
    return found


def registry_flag_true(snap: Snapshot) -> Found:
    """A lock hash or semaphore info hash that says its name is listed until a later time
    (l) is listed at least that long: the scripts write the registry only when l falls short,
    so a flag that overstated would leave a held name out of the listings (lib/registry)."""
    found: Found = []
    now = snap.now_ms
    for key, part, listed, _ in _flagged_as_listed(snap):
        member = ("lock:" if part == "lock" else "sem:") + key.split(f":{part}:", 1)[1]
        kept = _listed_until(snap, key, member)
        if kept is None or kept < listed:
            found.append(
                (
                    "registry_flag_true",
                    f"{key} says listed until t+{listed - now:.0f} ms; the registry keeps it "
                    f"{'not at all' if kept is None else f'until t+{kept - now:.0f} ms'}",
                )
            )
    return found


def semaphore_records_consistent(snap: Snapshot) -> Found:
    """Every semaphore holder (live or not yet pruned) has its h:<token> record in the info
    hash and every record a holder; every queued token has its lease and w:<token> record,
    and every lease and w: record a queued token (lib/semaphore)."""
    found: Found = []
    for key, state in snap.keys.items():
        if snap.part(key) != "semi":
            continue
        holders = set(_sibling(snap, key, "semi", "sem"))
        queued = set(_sibling(snap, key, "semi", "semq"))
        leased = set(_sibling(snap, key, "semi", "semw"))
        held = {n[2:] for n in state.names if n.startswith("h:")}
        waiting = {n[2:] for n in state.names if n.startswith("w:")}
        if holders != held:
            found.append(("semaphore_records_consistent", _differ(key, holders, held)))
        if not queued == leased == waiting:
            found.append(("semaphore_records_consistent", _differ(key, queued, leased, waiting)))
    for key in snap.keys:  # holders, queue or leases without the info hash
        part = snap.part(key)
        if part in ("sem", "semq", "semw") and key.replace(f":{part}:", ":semi:", 1) not in (
            snap.keys
        ):
            found.append(("semaphore_records_consistent", f"{key} has no info hash"))
    return found


def registry_consistent(snap: Snapshot) -> Found:
    """A bucket's registry lists the same members in its name list and its expiry list
    (lib/registry: an entry is added, pruned and removed in both)."""
    found: Found = []
    for key in snap.keys:
        if snap.part(key) == "reg:names":
            names = set(snap.holders(key))
            expiry = set(snap.holders(key.replace("reg:names", "reg:expiry")))
            if names != expiry:
                found.append(("registry_consistent", _differ(key, names, expiry)))
        elif snap.part(key) == "reg:expiry" and key.replace("reg:expiry", "reg:names") not in (
            snap.keys
        ):
            found.append(("registry_consistent", f"{key} has no name list"))
    return found


def _differ(key: str, first: set[str], *others: set[str]) -> str:
    every = first.union(*others)
    odd = sorted(t[:8] for t in every if not all(t in s for s in (first, *others)))
    return f"{key}: the lists differ in {', '.join(odd)}"


def registry_entry_bounded(snap: Snapshot) -> Found:
    """A name is listed at most REGISTRY_AHEAD_MS past the expiry of its hash (its l, which
    its entry follows): what a name leaves in the registry goes soon after the name's keys,
    also after a long hold was shortened or released early (lib/registry's registry_fit)."""
    found: Found = []
    now = snap.now_ms
    for key, _, listed, expiry in _flagged_as_listed(snap):
        if expiry is not None and listed > expiry + REGISTRY_AHEAD_MS:
            found.append(
                (
                    "registry_entry_bounded",
                    f"{key} is listed until t+{listed - now:.0f} ms, "
                    f"{listed - expiry:.0f} ms past its expiry",
                )
            )
    return found


def semaphore_keys_expire_together(snap: Snapshot) -> Found:
    """A semaphore's four keys expire together, at its info hash's l (until when its registry
    entry lasts): the scripts move the info hash's expiry only when l moves, and give the
    others l whenever they write them (lib/semaphore's semaphore_keep), so a record in the
    info hash never outlives the holders' or leases' key that would let a look drop it."""
    found: Found = []
    for key, state in snap.keys.items():
        if snap.part(key) != "semi":
            continue
        listed = float(state.fields[6]) if len(state.fields) >= 7 and state.fields[6] else None
        for part in ("semi", "sem", "semq", "semw"):
            other = snap.keys.get(key.replace(":semi:", f":{part}:", 1))
            if other is not None and (listed is None or other.expiry_ms != listed):
                found.append(
                    (
                        "semaphore_keys_expire_together",
                        f"{key.replace(':semi:', f':{part}:', 1)} expires at "
                        f"{other.expiry_ms}, its info hash's l is {listed}",
                    )
                )
    return found


def contention_bounded(snap: Snapshot) -> Found:
    """A bucket's contention figures (lib/hot) keep at most HOT_NAMES names, each a lock or
    semaphore of that bucket with its 39 whole, non-negative figures and windows no later
    than now, and expire at most twice HOT_LONG_MS from now."""
    found: Found = []
    for key, state in snap.keys.items():
        if snap.part(key) != "hot":
            continue
        pairs = dict(zip(state.fields[::2], state.fields[1::2], strict=True))
        if len(pairs) > HOT_NAMES:
            found.append(("contention_bounded", f"{key} keeps {len(pairs)} names"))
        if state.expiry_ms is not None and state.expiry_ms > snap.now_ms + 2 * HOT_LONG_MS:
            found.append(("contention_bounded", f"{key} expires too late"))
        bucket = int(key.split("{", 1)[1].split("}", 1)[0])
        for member, value in pairs.items():
            kind, _, name = member.partition(":")
            numbers = value.split()
            if kind not in ("lock", "sem") or KeySpace.bucket(name) != bucket:
                found.append(("contention_bounded", f"{key} counts {member!r}"))
            elif len(numbers) != 39 or not all(n.isdigit() for n in numbers):
                found.append(("contention_bounded", f"{key} {member}: {value!r}"))
            elif any(
                int(numbers[at]) > snap.now_ms // length
                for at, length in ((0, HOT_SHORT_MS), (19, HOT_LONG_MS))
            ):
                found.append(("contention_bounded", f"{key} {member}: a window ahead of now"))
    return found


def state_invariants(snap: Snapshot) -> Found:
    """Every per-step check of this module."""
    return (
        keys_expire(snap)
        + keys_outlive_contents(snap)
        + registry_covers_holds(snap)
        + lock_queue_consistent(snap)
        + queue_flagged(snap)
        + registry_flag_true(snap)
        + registry_entry_bounded(snap)
        + semaphore_records_consistent(snap)
        + semaphore_keys_expire_together(snap)
        + registry_consistent(snap)
        + contention_bounded(snap)
    )

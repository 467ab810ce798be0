"""Invariants of one script run: what it changed (the state of its lock or semaphore just
before and just after it, see probe.py), and (invariants_replies.py) its reply.

Each check is a function named after the promise; it returns the violations it found.
"""

from __future__ import annotations

from django_redis_locks.core.protocol.constants import RECENT_RELEASES
from django_redis_locks.core.protocol.wake_messages import split_message

from .invariants_replies import REPLY_CHECKS, Found, forced, holder_id, ints, refused
from .invariants_takeover import TAKE_OVER_CHECKS
from .probe import ScriptRun, Seen

#: lib/lock and lib/semaphore drop at most this many expired places (holders) per script.
LOCK_PRUNE, SEMAPHORE_PRUNE, REGISTRY_PRUNE = 16, 32, 16


def released_token_gone(run: ScriptRun) -> Found:
    """After a release by token (whatever it replied) the token is neither a live holder nor
    queued; after a forced release that evicted a holder, that holder neither."""
    if not run.name.endswith("_release"):
        return []
    if forced(run):
        hid = run.arg(0)
        tokens = {t for t in run.before.live_holders(run.now_ms) if holder_id(t) == hid}
        if run.reply != 1:
            return []
    else:
        tokens = {run.arg(0)}
    found: Found = []
    for token in tokens:
        if token in run.after.live_holders(run.now_ms) or token in run.after.queue:
            where = "holds" if token in run.after.live_holders(run.now_ms) else "is queued"
            found.append(("released_token_gone", f"{run.name} -> {run.reply}: {token[:8]} {where}"))
    return found


def handed(run: ScriptRun) -> set[str]:
    """The queued tokens this script handed the lock to or admitted (acquires and releases
    only: an extend or refresh of a holder that is also queued (after a failover, the replica
    may still have the place its confirmation removed) is neither)."""
    if not run.name.endswith(("_acquire", "_release")):
        return set()
    now, before, after = run.now_ms, run.before, run.after
    if before.kind == "lock":
        token = after.holder(now)
        if token and token in after.queue and before.fields[:2] != after.fields[:2]:
            return {token}
        return set()
    return {
        t
        for t, score in after.holders.items()
        if score > now and t in after.queue and before.holders.get(t) != score
    }


def handed_is_woken(run: ScriptRun) -> Found:
    """A waiter handed the lock or admitted by another caller's script is told at once: the
    script publishes a wake-up message naming it (without it, the waiter comes only at its
    re-check, and a hand-over's window may run out first). The caller's own grant is in its
    reply."""
    caller = run.arg(0) if run.name.endswith("_acquire") else ""
    told = {split_message(m)[0].rpartition("#")[2] for m in run.published}
    return [
        ("handed_is_woken", f"{run.name} handed {token[:8]} without a wake-up")
        for token in handed(run)
        if token != caller and holder_id(token) not in told
    ]


def handed_to_live_waiter(run: ScriptRun) -> Found:
    """A hand-over (lock) or admission (semaphore) made by this script goes to a queued
    waiter whose lease runs, and in ticket order: no live waiter ahead of it is left without
    the name (lock: the one handed it is first in the queue)."""
    now, after = run.now_ms, run.after
    waiters = after.live_waiters(now)
    holding = after.live_holders(now)
    found: Found = []
    for token in handed(run):
        if token not in waiters:
            found.append(("handed_to_live_waiter", f"{run.name} handed {token[:8]} a dead place"))
        elif any(w not in holding for w in waiters[: waiters.index(token)]):
            found.append(("handed_to_live_waiter", f"{run.name} passed over a live waiter"))
    return found


def newcomer_waits_its_turn(run: ScriptRun) -> Found:
    """A grant to a caller that was not queued (reply flag 0) leaves no live waiter without
    the name: the lock's only exception is the session whose slice is running, which keeps the
    name while its lock is reserved for it (and no other session takes a reserved lock)."""
    values = ints(run.reply)
    if run.name not in ("lock_acquire", "sem_acquire") or not values or values[0] != 1:
        return []
    if values[4] != 0 or run.arg(0) in run.before.queue:
        return []
    now, before = run.now_ms, run.before
    if before.kind == "lock":
        reserved = float(before.fields[2] or 0) > now and not before.holder(now)
        if reserved and before.fields[3] != run.arg(5):
            return [("newcomer_waits_its_turn", "a lock reserved for a session went to another")]
        if reserved:
            return []
    left = [w for w in run.after.live_waiters(now) if w not in run.after.live_holders(now)]
    if left:
        return [("newcomer_waits_its_turn", f"{run.name} granted ahead of {len(left)} waiter(s)")]
    return []


def release_hands_on(run: ScriptRun) -> Found:
    """A release hands the name on in the same script: after a lock release that released,
    the lock is held, handed over or reserved for the slice, or no live waiter is queued;
    after any semaphore acquire or release (but one refused as late, which writes nothing), a
    free slot leaves no live waiter unadmitted."""
    now, after = run.now_ms, run.after
    if refused(run):
        return []
    if run.name == "lock_release" and run.reply == 1:
        if after.holder(now) or float(after.fields[2] or 0) > now:
            return []
        if after.live_waiters(now):
            return [("release_hands_on", "a released lock is free while a live waiter queues")]
    if run.name in ("sem_acquire", "sem_release"):
        holding = after.live_holders(now)
        limit = int(after.fields[0] or 0)
        left = [w for w in after.live_waiters(now) if w not in holding]
        if left and len(holding) < limit:
            return [
                (
                    "release_hands_on",
                    f"{run.name}: {len(holding)}/{limit} slots, {left[0][:8]} waits",
                )
            ]
    return []


def slice_kept(run: ScriptRun) -> Found:
    """A holder that releases within its slice, while a live waiter queues, keeps the lock
    for its session until the slice ends (reserved, no hand-over yet)."""
    if run.name != "lock_release" or run.reply != 1 or forced(run):
        return []
    now, before, after = run.now_ms, run.before, run.after
    slice_end = float(before.fields[4] or 0)
    if slice_end <= now or not after.live_waiters(now):
        return []
    if float(after.fields[1] or 0) != 0 or float(after.fields[2] or 0) != slice_end:
        return [("slice_kept", f"released {slice_end - now:.0f} ms before its slice ended")]
    return []


def dead_places_dropped(run: ScriptRun) -> Found:
    """Expired places are dropped a bounded number per script (lib/lock: a release, or an
    acquire that finds the lock free and not reserved, LOCK_PRUNE;
    lib/semaphore: every acquire, and every release while anyone queues, SEMAPHORE_PRUNE
    holders and places; a release with nobody queued leaves expired holders, which never count,
    to the next acquire): when no
    more were expired, none is left. A new registry entry made at a server millisecond
    divisible by 4 drops the bucket's expired entries (lib/registry, REGISTRY_PRUNE). An
    acquire refused as late writes nothing (too_late_writes_nothing)."""
    now, before, after = run.now_ms, run.before, run.after
    if refused(run):
        return []
    found: Found = []

    def dead(scores: dict[str, float]) -> int:
        return sum(1 for s in scores.values() if s <= now)

    released = run.name == "lock_release" and run.reply == 1
    free = run.name == "lock_acquire" and not before.holder(now)
    looked = released or (free and float(before.fields[2] or 0) <= now)  # it sought the head
    if looked and dead(before.leases) <= LOCK_PRUNE and dead(after.leases):
        found.append(("dead_places_dropped", f"{run.name} left an expired place in the queue"))
    if run.name == "sem_acquire" or (run.name == "sem_release" and before.queue):
        if dead(before.holders) <= SEMAPHORE_PRUNE and dead(after.holders):
            found.append(("dead_places_dropped", f"{run.name} left an expired holder"))
        if before.queue and dead(before.leases) <= SEMAPHORE_PRUNE and dead(after.leases):
            found.append(("dead_places_dropped", f"{run.name} left an expired place"))
    new = set(after.registry) - set(before.registry)
    if new and now % 4 == 0 and dead(before.registry) <= REGISTRY_PRUNE and dead(after.registry):
        found.append(
            ("dead_places_dropped", f"{run.name} listed {min(new)} and kept expired entries")
        )
    return found


def recent_releases_kept(run: ScriptRun) -> Found:
    """A release (or forced release) that took effect puts its entry first in the recent
    releases, drops an older entry of the same hold, and keeps the RECENT_RELEASES newest
    (lib/gone)."""
    if not run.name.endswith("_release") or run.reply != 1:
        return []
    if forced(run):
        hid = run.arg(0)
        entry = f"X{hid}.{run.arg(2)}"
    else:
        hid = holder_id(run.arg(0))
        entry = f"R{hid}"
    expected = [entry] + [e for e in run.before.gone if e[1:17] != hid]
    expected = expected[:RECENT_RELEASES]
    if run.after.gone != expected:
        return [("recent_releases_kept", f"{run.name}: {run.after.gone} after {run.before.gone}")]
    return []


def forced_told(run: ScriptRun) -> Found:
    """A holder's release, extend or refresh with a token whose hold was force-released (its
    latest recent release an "X" entry) and that neither holds nor waits is told so (-2)."""
    name, token = run.name, run.arg(0)
    if name not in ("lock_release", "sem_release", "lock_extend", "sem_refresh"):
        return []
    if forced(run) or token in run.before.live_holders(run.now_ms) or token in run.before.queue:
        return []
    hid = holder_id(token)
    latest = next((e for e in run.before.gone if e[1:17] == hid), "")
    if not latest.startswith("X"):
        return []
    values = [run.reply] if isinstance(run.reply, int) else ints(run.reply)
    if values != [-2]:
        return [("forced_told", f"{name} of a force-released hold replied {run.reply!r}")]
    return []


def contention_counted(run: ScriptRun) -> Found:
    """The contention figures (lib/hot) change only where the name is contended, and there
    always: a try refused, a waiter leaving the queue (or giving back unconfirmed what it was
    handed), a grant ending a wait (a confirmed
    hand-over, a queued waiter's own grant) are counted; a grant to a caller that neither
    waited nor was queued, an extend, a refresh, a refusal that writes nothing (a limit
    mismatch, too late, evicted) and a release with nobody queued leave them as they were."""
    changed = run.before.hot != run.after.hot
    values = ints(run.reply) if not isinstance(run.reply, int) else [int(run.reply)]
    token, lock = run.arg(0), run.name.startswith("lock")
    queued = token in run.before.queue
    allowed = must = False
    if run.name.endswith("_acquire") and values:
        waited = int(run.arg(9 if lock else 8)) > 0
        if values[0] == 0:
            allowed = True
            must = run.arg(3 if lock else 4) == "try"
        elif values[0] == 1:
            allowed = waited or queued
            must = queued or (values[4] == 0 and waited)
    elif run.name.endswith("_release") and values:
        allowed = values[0] == 2 or bool(run.before.queue)
        # (a waiter handed the name, or admitted, that gives it back unconfirmed leaves too)
        handed = values[0] == 1 and token in run.before.live_waiters(run.now_ms)
        must = values[0] == 2 or (handed and not forced(run))
    if changed and not allowed:
        return [("contention_counted", f"{run.name} -> {run.reply!r} wrote contention figures")]
    if must and not changed:
        return [("contention_counted", f"{run.name} -> {run.reply!r} was not counted")]
    return []


CHECKS = (
    *REPLY_CHECKS,
    released_token_gone,
    handed_to_live_waiter,
    handed_is_woken,
    newcomer_waits_its_turn,
    release_hands_on,
    slice_kept,
    dead_places_dropped,
    recent_releases_kept,
    forced_told,
    contention_counted,
    *TAKE_OVER_CHECKS,
)


def script_invariants(run: ScriptRun) -> Found:
    """Every check of this module on one script run."""
    found: Found = []
    for check in CHECKS:
        found += check(run)
    return found


__all__ = ["CHECKS", "Seen", "holder_id", "script_invariants"]

"""Invariants of one script run about its reply: against its script's header, and against
the state it read (see probe.py). The checks of what a script changed are in
invariants_script.py, which runs both.

Each check is a function named after the promise; it returns the violations it found.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django_redis_locks.core.protocol.wake_messages import split_message

from .probe import ScriptRun

Found = list[tuple[str, str]]  # (invariant, detail)
#: lib/semaphore's estimate looks at the first this many holders to expire.
SEMAPHORE_ESTIMATED = 8
#: Documented replies (each script's header): release codes, and the first value of a list.
RELEASE_CODES = {"lock_release": {1, 3, 2, 0, -1, -2}, "sem_release": {1, 3, 2, 0, -2}}
FORCED_CODES = {"lock_release": {1, 3, 0, -1}, "sem_release": {1, 3, 0}}
RENEWAL_CODES = {"lock_extend": {1, 0, -1, -2}, "sem_refresh": {1, 0, -2}}
TAKE_OVER_CODES = {"lock_take_over": {1, 0, -2}}


def holder_id(token: str) -> str:
    return hashlib.sha1(token.encode(), usedforsecurity=False).hexdigest()[:16]


def ints(reply: Any) -> list[int] | None:
    try:
        return [int(v) for v in reply]
    except (TypeError, ValueError):
        return None


def forced(run: ScriptRun) -> bool:
    return run.name.endswith("_release") and run.arg(1) == "holder"


def refused(run: ScriptRun) -> bool:
    """An acquire that came after its deadline, or a lock acquire with an evicted token: it
    wrote nothing, not even housekeeping."""
    if not isinstance(run.reply, list):
        return False
    return run.reply[:1] == [-3] or (run.name == "lock_acquire" and run.reply[:1] == [-4])


def reply_documented(run: ScriptRun) -> Found:
    """Every reply is one its script's header lists, in its shape: release codes; extend and
    refresh {1, ttl_ms, now_ms} (the refreshed TTL as asked) or a lone code; take-over
    {1, fence, ttl_ms, now_ms, 0|1} (0: the TTL asked for) or {0} / {-2}; acquire
    {1, fence/ticket, ttl_ms, now_ms, 0|1}, {0, holder_ttl_ms, position, now_ms, estimate_ms}
    (estimate at most holder_ttl_ms), {-3, now_ms} (past the request's deadline, and only
    then), {-4, now_ms} (see evicted_refused), or for a semaphore {-1, stored limit}."""
    name, reply, now = run.name, run.reply, run.now_ms
    ok = True
    if name in RELEASE_CODES:
        codes = FORCED_CODES[name] if forced(run) else RELEASE_CODES[name]
        ok = isinstance(reply, int) and reply in codes
    elif name in RENEWAL_CODES:
        values = ints(reply)
        ok = values is not None and len(values) in (1, 3) and values[0] in RENEWAL_CODES[name]
        if ok and values and values[0] == 1:
            ok = len(values) == 3 and values[1] > 0 and values[2] == now
            if name == "sem_refresh":
                ok = ok and values[1] == int(run.arg(1))
            else:
                ok = ok and values[1] <= int(run.arg(3))
        elif ok and values:
            ok = len(values) == 1
    elif name in TAKE_OVER_CODES:
        values = ints(reply)
        ok = values is not None and bool(values) and values[0] in TAKE_OVER_CODES[name]
        if ok and values and values[0] == 1:
            ok = len(values) == 5 and values[1] > 0 and values[2] > 0 and values[3] == now
            ok = ok and (values[4] == 1 or (values[4] == 0 and values[2] == int(run.arg(3))))
        elif ok and values:
            ok = len(values) == 1
    else:
        values = ints(reply)
        deadline = int(run.arg(8 if name == "lock_acquire" else 7))
        if values and values[0] == -3:
            ok = values == [-3, now] and 0 < deadline < now
        elif deadline > 0 and now > deadline:
            ok = False  # (a request past its deadline is refused)
        elif values and values[0] == -4:
            ok = values == [-4, now]
        elif values and values[0] == -1 and name == "sem_acquire":
            ok = len(values) == 2 and values[1] >= 1
        elif values and len(values) == 5 and values[3] == now:
            code, x, y, _, z = values
            if code == 1:
                ok = x > 0 and y > 0 and z in (0, 1)
            else:
                ok = code == 0 and y >= 0 and (x == -1 == z or (x > 0 and 1 <= z <= x))
        else:
            ok = False
    return [] if ok else [("reply_documented", f"{name}{_args(run)} replied {reply!r}")]


def _args(run: ScriptRun) -> str:
    return "(" + ", ".join(str(a)[:12] for a in run.call.args[:4]) + ")"


def position_reported(run: ScriptRun) -> Found:
    """An acquire that is not granted reports its 1-based place in the queue after the script
    (0: not queued); one that is granted leaves the queue (a confirmed hand-over or
    admission, a resend, or a grant)."""
    values = ints(run.reply)
    if run.name not in ("lock_acquire", "sem_acquire") or not values or values[0] == -1:
        return []
    token, queue = run.arg(0), run.after.queue
    rank = run.after.in_order().index(token) + 1 if token in queue else 0
    if values[0] == 1 and rank:
        return [("position_reported", f"{run.name} granted {token[:8]} but left it queued")]
    if values[0] == 0 and values[2] != rank:
        return [("position_reported", f"{run.name} said position {values[2]}, queue has {rank}")]
    return []


def confirmed_only_if_held(run: ScriptRun) -> Found:
    """An acquire replies "already held with this very token" (flag 1) only when the token
    held before the script (a hand-over or admission to confirm, or a resend) or, for a
    semaphore, was queued and the script's own admission pass admitted it: a fresh grant
    says 0."""
    values = ints(run.reply)
    if run.name not in ("lock_acquire", "sem_acquire") or not values or values[0] != 1:
        return []
    token = run.arg(0)
    held = token in run.before.live_holders(run.now_ms)
    held = held or (run.before.kind == "sem" and token in run.before.queue)
    if (values[4] == 1) != held:
        return [("confirmed_only_if_held", f"{run.name} flag {values[4]}, held before: {held}")]
    return []


def wakeup_names_a_waiter(run: ScriptRun) -> Found:
    """Every wake-up message a script publishes names (by holder id) a token that was queued
    before it: a message that names nobody wakes nobody, and the waiter comes only at its
    re-check."""
    waiting = {holder_id(t) for t in run.before.queue}
    found: Found = []
    for message in run.published:
        key = split_message(message)[0]
        member, _, hid = key.rpartition("#")
        if hid not in waiting or not member.startswith(("lock:", "sem:")):
            found.append(("wakeup_names_a_waiter", f"{run.name} published {message!r}"))
    return found


def _one_hold_left(avg: float | None, held_ms: float) -> float:
    """How long a hold held ``held_ms`` likely has left, by the average hold ``avg``: the
    rest of the average, or, past it, about one more hold (at most 1 s, at least 1 ms); with
    no history (``avg`` None), as long again as it has run (at least 1 s)."""
    if avg is None:
        return max(held_ms, 1000.0)
    left = avg - held_ms
    return left if left > 0 else max(min(avg, 1000.0), 1.0)


def estimate_documented(run: ScriptRun) -> Found:
    """A contended acquire's estimate is the documented one (reference: LockNotAcquired's
    ``retry_after``; the scripts' headers), recomputed from the state the script read: the
    name's average hold minus how long the holder has held it (past the average: one more
    average, at most 1 s), at most the holder's remaining TTL, the reply's ``holder_ttl_ms``
    (lock) or ``wait_ms`` (semaphore: the first live holder's TTL, which it checks too); for a
    semaphore the soonest such figure among the first SEMAPHORE_ESTIMATED holders to expire
    (after the script; by expiry, then token, as Redis ranks them). No history: as long again
    as the holder has held it (at least 1 s). No live holder (a lock's reservation or
    hand-over): the TTL itself."""
    values = ints(run.reply)
    if run.name not in ("lock_acquire", "sem_acquire") or not values or len(values) != 5:
        return []
    if values[0] != 0:
        return []
    now, wait, estimate = run.now_ms, values[1], values[4]
    expected = float(wait)
    if run.name == "lock_acquire":  # from the lock as the script found it
        seen = run.before
        holder, acquired, avg = seen.holder(now), seen.fields[5], seen.fields[6]
        if holder and holder != run.arg(0):
            held = now - float(acquired or now)
            expected = min(_one_hold_left(float(avg) if avg else None, held), wait)
    else:  # from the holders after its admissions, as semaphore_estimate reads them
        seen = run.after
        live = sorted((score, t) for t, score in seen.holders.items() if score > now)
        first = int(live[0][0]) - now if live else -1
        if wait != first:
            return [("estimate_documented", f"sem_acquire: wait_ms {wait}, first holder {first}")]
        avg = seen.fields[1]
        if wait >= 0:
            for _, token in live[:SEMAPHORE_ESTIMATED]:
                held = now - float(seen.acquired.get(token) or now)
                expected = min(expected, _one_hold_left(float(avg) if avg else None, held))
    if estimate != int(expected):
        detail = f"{run.name} estimated {estimate} ms, documented {int(expected)} ms (ttl {wait})"
        return [("estimate_documented", detail)]
    return []


def too_late_writes_nothing(run: ScriptRun) -> Found:
    """An acquire refused as past its deadline ({-3, now_ms}), or a lock acquire refused for
    an evicted token ({-4, now_ms}), changed nothing."""
    if run.name not in ("lock_acquire", "sem_acquire") or not refused(run):
        return []
    if run.before != run.after:
        return [("too_late_writes_nothing", f"{run.name} refused ({run.reply!r}), yet wrote")]
    return []


def evicted_refused(run: ScriptRun) -> Found:
    """An acquire (in time) whose token the name's recent releases list as force-released
    ("X" its latest entry) and that does not hold live is refused: {-4, now_ms}, the token
    neither holds nor waits after it; and only such a token is. (A semaphore's refusal may
    have done the script's housekeeping: expired holders pruned, waiters admitted.)"""
    values = ints(run.reply)
    if run.name not in ("lock_acquire", "sem_acquire") or not values or values[0] == -3:
        return []
    token, now = run.arg(0), run.now_ms
    hid = holder_id(token)
    latest = next((e for e in run.before.gone if e[1:17] == hid), "")
    evicted = latest.startswith("X") and token not in run.before.live_holders(now)
    if evicted != (values[0] == -4):
        return [("evicted_refused", f"{run.name} replied {values[:2]}, evicted: {evicted}")]
    if evicted and (token in run.after.live_holders(now) or token in run.after.queue):
        return [("evicted_refused", f"{run.name} refused {token[:8]} yet it holds or waits")]
    return []


def no_revival(run: ScriptRun) -> Found:
    """An extend or refresh succeeds only for a hold live when it ran: a hold whose TTL ran
    out (expiry at or before the server's now) is never revived; and only for the grant it
    names (its fence or ticket): a later grant of the same token, by a late copy of its
    acquire, is not the caller's."""
    values = ints(run.reply)
    if run.name not in RENEWAL_CODES or not values or values[0] != 1:
        return []
    if run.arg(0) not in run.before.live_holders(run.now_ms):
        return [("no_revival", f"{run.name} renewed {run.arg(0)[:8]}, not a live holder")]
    asked = run.arg(5 if run.name == "lock_extend" else 2)
    if asked and run.before.grant_of(run.arg(0)) != asked:
        return [("no_revival", f"{run.name} renewed {run.arg(0)[:8]}'s later grant, not {asked}")]
    return []


def release_names_its_grant(run: ScriptRun) -> Found:
    """A holder's release that names its hold's fence (ticket) while the token holds another
    grant (a late copy's) releases it but answers that the hold was gone: -2 when the
    recent releases list the token as force-released, else 0; one whose grant is the token's
    answers 1."""
    values = ints([run.reply]) if isinstance(run.reply, int) else None
    if run.name not in RELEASE_CODES or forced(run) or values is None:
        return []
    token, asked = run.arg(0), run.arg(3) if len(run.call.args) > 3 else ""
    if not asked or token not in run.before.live_holders(run.now_ms):
        return []
    if run.before.grant_of(token) == asked:
        expected = 1
    else:
        latest = next((e for e in run.before.gone if e[1:17] == holder_id(token)), "")
        expected = -2 if latest.startswith("X") else 0
    if values[0] != expected:
        return [("release_names_its_grant", f"{run.name} replied {run.reply}, not {expected}")]
    return []


REPLY_CHECKS = (
    too_late_writes_nothing,
    release_names_its_grant,
    evicted_refused,
    no_revival,
    reply_documented,
    estimate_documented,
    position_reported,
    confirmed_only_if_held,
    wakeup_names_a_waiter,
)

__all__ = ["REPLY_CHECKS", "Found", "forced", "holder_id", "ints", "refused"]

"""Invariants of one run of ``lock_take_over`` (a handed-off hold taken over with its ticket; see
handoffs.py): its reply is the one the lock it read calls for, and it changed only what that
reply says. (The reply's shape is reply_documented's, in invariants_replies.py.)

Each check is a function named after the promise; it returns the violations it found.
"""

from __future__ import annotations

from .invariants_replies import Found, holder_id, ints
from .probe import ScriptRun, Seen

NAME = "lock_take_over"


def _forced(seen: Seen, token: str) -> bool:
    """Whether the recent releases list ``token``'s hold as force-released (its latest entry)."""
    latest = next((e for e in seen.gone if e[1:17] == holder_id(token)), "")
    return latest.startswith("X")


def take_over_as_read(run: ScriptRun) -> Found:
    """A take-over answers "taken over already" (flag 1, with the hold's fence and what is left
    of it) only when its new token held live (a resend); takes the hold over (flag 0, with a
    fence above the ticket's) only when the ticket's token held live with the ticket's fence;
    and else answers -2 when the name's recent releases list the ticket's token as
    force-released, 0 when not."""
    if run.name != NAME:
        return []
    old, fence, new = run.arg(0), run.arg(1), run.arg(2)
    now, before = run.now_ms, run.before
    values, holder = ints(run.reply) or [], before.holder(now)
    if holder == new:
        left = int(float(before.fields[1])) - now
        ok, expected = values == [1, int(before.fields[7]), left, now, 1], "a resend's grant"
    elif holder == old and before.fields[7] == fence:
        ok = len(values) == 5 and values[0] == 1 and values[4] == 0 and values[1] > int(fence)
        expected = "a take-over with a higher fence"
    else:
        expected = "{-2}" if _forced(before, old) else "{0}"
        ok = values == ([-2] if expected == "{-2}" else [0])
    if ok:
        return []
    return [("take_over_as_read", f"{NAME} replied {run.reply!r}, not {expected}")]


def take_over_moves_the_hold(run: ScriptRun) -> Found:
    """A take-over (flag 0) makes its new token the live holder with the fence it replied, for
    the TTL asked, in its session with the slice over and nothing reserved; the ticket's token
    holds nothing after it; the queue, its records and leases and the recent releases stay as
    they were (waiters stay queued). Any other reply wrote nothing."""
    if run.name != NAME:
        return []
    values = ints(run.reply) or []
    before, after, now = run.before, run.after, run.now_ms
    if len(values) != 5 or values[0] != 1 or values[4] != 0:
        wrote = before != after
        return [("take_over_moves_the_hold", f"{NAME} -> {values} wrote")] if wrote else []
    found: list[str] = []
    if after.holder(now) != run.arg(2) or after.fields[7] != str(values[1]):
        found.append(f"the lock holds {after.fields[0][:8]} with fence {after.fields[7]}")
    elif int(after.fields[1]) != now + int(run.arg(3)):
        found.append(f"the hold expires at t+{int(after.fields[1]) - now}, not its TTL")
    if after.fields[3] != run.arg(5) or float(after.fields[4] or 0) > now:
        found.append("the hold is not in the taker's session, or its slice runs on")
    if float(after.fields[2] or 0) > now:
        found.append("the lock is reserved")
    if run.arg(0) in after.live_holders(now):
        found.append("the ticket's token still holds")
    kept = (before.queue, before.leases, before.records, before.gone)
    if kept != (after.queue, after.leases, after.records, after.gone):
        found.append("the queue or the recent releases changed")
    return [("take_over_moves_the_hold", f"{NAME} -> {values[:2]}: {what}") for what in found]


TAKE_OVER_CHECKS = (take_over_as_read, take_over_moves_the_hold)

__all__ = ["TAKE_OVER_CHECKS"]

"""Numbers that the scripts and the Python side share, defined once.

The Lua scripts name them as ``@NAME@``; :func:`.scripting.load` pastes the values in when it
reads a script, so they never travel with a call.
"""

from __future__ import annotations

__all__ = [
    "FRESH_LEASE_MS",
    "HANDOVER_WINDOW_MS",
    "RETENTION_MS",
    "SCRIPT_CONSTANTS",
    "WAITER_LEASE_MS",
]

#: How long what is left of a released name stays in Redis (ms): its last fence, its recent
#: releases (so that a resent release is recognised) and how long its holds last. Past that
#: the next fence still comes out larger, from the server clock in microseconds. (A held
#: lock's hash expires this long after the hold's TTL, if nobody releases it.)
RETENTION_MS = 5 * 60 * 1000
#: How long a blocked waiter keeps its place in a queue without coming back to ask (ms).
#: Waiters ask at least every ``recheck_seconds`` (at most 2 s apart when a slice of up to
#: 1 s delays them); one that crashed or stalled longer than this loses its place (and takes a
#: new one at the back when it asks again).
WAITER_LEASE_MS = 3000
#: A waiter whose lease has more than this left asked within the last 1.5 s: a hand-over to
#: it is for its full TTL if its process hears the message, and it needs no round trip.
FRESH_LEASE_MS = 1500
#: How long a release hands the lock (or a slot) to a waiter not known to be alive, before
#: that waiter confirms it (ms): a waiter that died while queued keeps nothing longer.
HANDOVER_WINDOW_MS = 1000

#: What ``@NAME@`` stands for in the scripts.
SCRIPT_CONSTANTS: dict[str, int] = {
    "RETENTION_MS": RETENTION_MS,
    "WAITER_LEASE_MS": WAITER_LEASE_MS,
    "FRESH_LEASE_MS": FRESH_LEASE_MS,
    "HANDOVER_WINDOW_MS": HANDOVER_WINDOW_MS,
}

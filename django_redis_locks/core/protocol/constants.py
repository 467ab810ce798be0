"""Numbers that the scripts and the Python side share, defined once.

The Lua scripts name them as ``@NAME@``; :func:`.scripting.load` pastes the values in when it
reads a script. ``WAITER_LEASE_MS`` also travels with each queued call, as its lease.
"""

from __future__ import annotations

__all__ = [
    "HANDOVER_WINDOW_MS",
    "RECENT_RELEASES",
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
#: How long a release hands the lock (or a slot) to the first waiter before that waiter
#: confirms it with its own script (ms): a waiter that died while queued keeps nothing longer
#: at a time. A waiter that misses it keeps its place and is handed the name again.
HANDOVER_WINDOW_MS = 1000

#: How many recent releases a name keeps (lib/gone.lua), so that a resent release or forced
#: release is recognised and an evicted holder learns it was force-released. A resend comes
#: within moments. Three entries (53 bytes) keep the hash in Redis's compact encoding (values of
#: at most 64 bytes), so a name released 20 times keeps under 300 bytes.
RECENT_RELEASES = 3

#: What ``@NAME@`` stands for in the scripts.
SCRIPT_CONSTANTS: dict[str, int] = {
    "RETENTION_MS": RETENTION_MS,
    "WAITER_LEASE_MS": WAITER_LEASE_MS,
    "HANDOVER_WINDOW_MS": HANDOVER_WINDOW_MS,
    "RECENT_RELEASES": RECENT_RELEASES,
}

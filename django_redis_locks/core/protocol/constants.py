"""Numbers that the scripts and the Python side share, defined once.

The Lua scripts name them as ``@NAME@``; :func:`.scripting.load` pastes the values in when it
reads a script. ``WAITER_LEASE_MS`` also travels with each queued call, as its lease.
"""

from __future__ import annotations

__all__ = [
    "HANDOVER_WINDOW_MS",
    "HOT_LONG_MS",
    "HOT_NAMES",
    "HOT_SHORT_MS",
    "RECENT_RELEASES",
    "REGISTRY_AHEAD_MS",
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
#: at most 64 bytes), so a name released 20 times keeps under 300 bytes. (A forced release's
#: entry is 26 bytes: with two of them among the three the value is longer, and that name's
#: hash takes the larger encoding until it expires.)
RECENT_RELEASES = 3

#: How much longer than its keys need a name stays listed in its bucket's registry (ms,
#: lib/registry.lua): a name in use is listed anew at most once in this time, instead of on
#: every acquire and release, and listings skip the free names they meet. An entry is kept
#: at most this long past the expiry of its name's keys (an entry kept longer, from a long
#: hold shortened or released early, is brought back), so a released name leaves the
#: registry within 8 minutes (its hash: within 6).
REGISTRY_AHEAD_MS = 2 * 60 * 1000

#: The two windows over which the scripts count contention per name (ms; lib/hot.lua): the
#: hot-locks listings show the last 5 and the last 60 minutes.
HOT_SHORT_MS = 5 * 60 * 1000
HOT_LONG_MS = 60 * 60 * 1000
#: Most names whose contention one bucket keeps (of 256 buckets): a new contended name
#: replaces the bucket's least contended one when it is full, so the figures take at most a
#: few hundred kilobytes in all (and expire two hours after the bucket's last contention).
HOT_NAMES = 32

#: What ``@NAME@`` stands for in the scripts.
SCRIPT_CONSTANTS: dict[str, int] = {
    "RETENTION_MS": RETENTION_MS,
    "WAITER_LEASE_MS": WAITER_LEASE_MS,
    "HANDOVER_WINDOW_MS": HANDOVER_WINDOW_MS,
    "RECENT_RELEASES": RECENT_RELEASES,
    "REGISTRY_AHEAD_MS": REGISTRY_AHEAD_MS,
    "HOT_SHORT_MS": HOT_SHORT_MS,
    "HOT_LONG_MS": HOT_LONG_MS,
    "HOT_NAMES": HOT_NAMES,
}

"""The bound on calls during a failover, shared by scenarios 12 (Sentinel) and 13 (Cluster)."""

from __future__ import annotations

from django_redis_locks.core import Lock

#: The workers' socket timeout.
SOCKET_TIMEOUT = 0.5
#: The reference's bound for a call during a failover: two socket timeouts.
BOUND = 2 * SOCKET_TIMEOUT
#: Slack on that bound for a loaded 2-core machine.
SLACK = 0.5


def limit(operation: str) -> float:
    """How long a failed call may take: the bound (plus slack); a blocking acquire may first
    wait for the lock, and finds out at its next attempt, a re-check interval later."""
    wait = Lock.recheck_seconds if operation.startswith("acquire") else 0.0
    return wait + BOUND + SLACK

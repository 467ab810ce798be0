"""Whether the lock server may evict keys: a full Redis that evicts can drop a live lock.

Every key of a lock or semaphore has a TTL, so ``volatile-*`` policies evict them as readily
as ``allkeys-*``; only ``noeviction`` (or no memory limit at all) keeps a live hold until its
owner releases it or its TTL runs out. The policy is read from ``INFO memory`` (every master
of a Cluster): once per process and Backend, right after the first call that Redis answered
(:meth:`.backend.Backend.check_eviction`, one round trip), and by the Django check
``django_redis_locks.W003`` (``manage.py check --deploy``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from .interruptions import guard

__all__ = [
    "SAFE_POLICY",
    "awarn_if_evicting",
    "eviction_risk",
    "policy_message",
    "warn_if_evicting",
]

logger = logging.getLogger(__name__)

#: The one policy under which Redis never drops a key to free memory.
SAFE_POLICY = "noeviction"


def _memory_sections(info: Any) -> list[Mapping[str, Any]]:
    """``INFO memory`` of the server, or of each node of a Cluster."""
    if isinstance(info, Mapping) and "maxmemory_policy" not in info:
        return [section for section in info.values() if isinstance(section, Mapping)]
    return [info]


def policy_message(policy: str, maxmemory: int) -> str | None:
    """What is wrong with ``policy`` under a ``maxmemory`` limit (bytes), or None."""
    if policy == SAFE_POLICY or maxmemory <= 0:
        return None
    return (
        f"the lock Redis has maxmemory-policy {policy} with maxmemory {maxmemory} bytes: when "
        "it is full it evicts keys, live locks and semaphore slots included (every one has a "
        f"TTL), and another caller then gets a name that is still held. Set maxmemory-policy "
        f"{SAFE_POLICY} on the server that holds the locks (or give the locks a Redis of "
        "their own)"
    )


def _risk(info: Any) -> str | None:
    for section in _memory_sections(info):
        policy = section.get("maxmemory_policy")
        message = policy_message(str(policy), int(section.get("maxmemory", 0) or 0))
        if policy is not None and message is not None:
            return message
    return None


def eviction_risk(client: Any) -> str | None:
    """Read the server's policy; a message if it may evict lock keys, else None. Raises what
    the client raises (a connection error, or NOPERM for a user without ``+info``)."""
    with guard():  # (see .interruptions)
        info = client.info("memory")
    return _risk(info)


def warn_if_evicting(client: Any, name: str) -> None:
    """Log a WARNING if the server behind ``client`` may evict lock keys (never raises)."""
    try:
        message = eviction_risk(client)
    except Exception as exc:  # a refusal or an outage: say so quietly, the locks work on
        _unread(name, exc)
        return
    _report(name, message)


async def awarn_if_evicting(client: Any, name: str) -> None:
    """Asyncio twin of :func:`warn_if_evicting` (``client`` is an asyncio client)."""
    try:
        message = _risk(await client.info("memory"))
    except Exception as exc:
        _unread(name, exc)
        return
    _report(name, message)


def _unread(name: str, exc: Exception) -> None:
    logger.info(
        "could not read the eviction policy of %s (%s: %s); make sure its maxmemory-policy is "
        "%s (grant +info to let the library check)",
        name,
        type(exc).__name__,
        exc,
        SAFE_POLICY,
    )


def _report(name: str, message: str | None) -> None:
    if message is not None:
        logger.warning("%s: %s.", name, message)

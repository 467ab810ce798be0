"""Introspection of live locks and semaphores, for operators, the admin page and the CLI.

``list_locks`` / ``list_semaphores`` page through what is held right now (name prefix
filter, cursor paging), ``get_lock`` / ``get_semaphore`` describe one name, and
``force_release`` evicts one specific hold, ``hot_names`` says which names were the most
contended over the last 5 or 60 minutes. Each takes ``using=<cache alias>`` (default: the
configured one) or ``client=<redis client>``, like the primitives. Django-free: it is the
core's registry module under a shorter name.
"""

from __future__ import annotations

from .core.hot import HotName, hot_names
from .core.info import HolderInfo, Page, SemaphoreInfo, WaiterInfo
from .core.registry import (
    MAX_PAGE_SIZE,
    force_release,
    get_lock,
    get_semaphore,
    list_locks,
    list_semaphores,
)

__all__ = [
    "MAX_PAGE_SIZE",
    "HolderInfo",
    "HotName",
    "Page",
    "SemaphoreInfo",
    "WaiterInfo",
    "force_release",
    "get_lock",
    "get_semaphore",
    "hot_names",
    "list_locks",
    "list_semaphores",
]

"""A semaphore-limited management command asking for its slot, and its policy when every
slot is taken.

``acquire_slot`` asks for a slot as the run's policy says (``"wait"``: queue for up to its
wait; otherwise: only a free one), turning the Redis and limit errors it meets into
CommandError. ``report_no_slot`` carries out the policy when no slot was had: CommandError
for ``"wait"`` and ``"fail"``, a message on stderr for ``"skip"``, each saying why
(``busy_reason``).
"""

from __future__ import annotations

import logging

from django.core.management.base import CommandError, OutputWrapper

from django_redis_locks.core.errors import (
    LockBackendError,
    LockConfigurationError,
    LockError,
    SemaphoreLimitMismatch,
)
from django_redis_locks.core.semaphore import Semaphore

from .options import SemaphoreConfig

__all__ = ["acquire_slot", "busy_reason", "report_no_slot"]

# The command mixin's logger: what a run says about its slot is logged in one place.
logger = logging.getLogger("django_redis_locks.commands")


def acquire_slot(semaphore: Semaphore, config: SemaphoreConfig, label: str) -> bool:
    """Ask for a slot: wait for one (``"wait"``) or take a free one; True once taken."""
    try:
        if config.policy == "wait":
            return semaphore.acquire(blocking=True, timeout=config.wait)
        return semaphore.acquire(blocking=False)
    except SemaphoreLimitMismatch as exc:
        raise CommandError(
            f"{label}: {config.name!r} is in use with limit {exc.stored_limit} by runs "
            f"that are still going; this run asks for {exc.limit}. Every copy must use "
            f"the same limit: pass --semaphore-limit {exc.stored_limit}, or wait until "
            "those runs ended (the new limit then takes over)"
        ) from exc
    except (LockBackendError, LockConfigurationError) as exc:
        raise CommandError(f"{label}: cannot take a slot of {config.name!r}: {exc}") from exc


def report_no_slot(config: SemaphoreConfig, label: str, stderr: OutputWrapper) -> None:
    """No slot was had: raise CommandError (``"wait"``, ``"fail"``), or say so (``"skip"``)."""
    busy = busy_reason(config)
    if config.policy == "wait":
        raise CommandError(
            f"{label}: waited {config.wait:g} s for a slot of {config.name!r}, but {busy}"
        )
    if config.policy == "fail":
        raise CommandError(f"{label}: not running: {busy}")
    logger.info("command: %s skipped: %s", label, busy)
    stderr.write(f"{label}: skipped: {busy}")


def busy_reason(config: SemaphoreConfig) -> str:
    """Why no slot was free: "2 copies already running (limit 2)"."""
    from django_redis_locks.inspection import get_semaphore

    try:
        info = get_semaphore(config.name, using=config.using)
    except LockError:
        return f"all {config.limit} slots are taken"
    running = 0 if info is None else info.count
    waiting = 0 if info is None else info.waiting
    text = f"{running} {'copy' if running == 1 else 'copies'} already running"
    if waiting:
        text += f" and {waiting} {'waits' if waiting == 1 else 'wait'}"
    return f"{text} (limit {config.limit})"

"""Which hold ``manage.py redis_locks release`` evicts: NAME, ``--kind`` and ``--holder``
resolved to exactly one live holder, or a :class:`CommandError` saying why none can be chosen.
"""

from __future__ import annotations

from typing import Literal

from django.core.management.base import CommandError

from django_redis_locks.inspection import HolderInfo, get_lock, get_semaphore
from django_redis_locks.management.listing_output import who

__all__ = ["Kind", "release_target"]

Kind = Literal["lock", "semaphore"]


def release_target(
    name: str, kind: Kind | None, holder_id: str | None, using: str | None
) -> tuple[Kind, HolderInfo]:
    """The kind and holder that ``release NAME`` (with ``--kind`` and ``--holder`` as given)
    evicts; a :class:`CommandError` when none, or more than one, fits."""
    lock = get_lock(name, using=using) if kind in (None, "lock") else None
    semaphore = get_semaphore(name, using=using) if kind in (None, "semaphore") else None
    sem_holders = semaphore.holders if semaphore is not None else ()
    if kind is None:
        if lock is None and not sem_holders:
            raise CommandError(f"Nothing named {name!r} is held (no lock, no semaphore).")
        if lock is not None and sem_holders:
            if holder_id is not None and holder_id == lock.holder_id:
                kind = "lock"
            elif holder_id is not None and any(h.holder_id == holder_id for h in sem_holders):
                kind = "semaphore"
            else:
                raise CommandError(
                    f"Both a lock and a semaphore named {name!r} are held: pass --kind."
                )
        else:
            kind = "lock" if lock is not None else "semaphore"
    if kind == "lock":
        if lock is None:
            raise CommandError(f"The lock {name!r} is not held.")
        if holder_id is not None and holder_id != lock.holder_id:
            raise CommandError(
                f"The lock {name!r} is held by {lock.holder_id} ({who(lock)}), not by "
                f"{holder_id}; nothing was changed."
            )
        return "lock", lock
    if not sem_holders:
        raise CommandError(f"The semaphore {name!r} has no holders.")
    ids = ", ".join(f"{h.holder_id} ({who(h)})" for h in sem_holders)
    if holder_id is None:
        if len(sem_holders) > 1:
            raise CommandError(
                f"The semaphore {name!r} has {len(sem_holders)} holders: pass --holder with "
                f"one of {ids}."
            )
        return "semaphore", sem_holders[0]
    for holder in sem_holders:
        if holder.holder_id == holder_id:
            return "semaphore", holder
    raise CommandError(f"The semaphore {name!r} has no holder {holder_id}; its holders: {ids}.")

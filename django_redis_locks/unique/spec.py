"""What ``@unique_task`` was told: the mode, the name template, the policies; and the locks
it takes for a task's arguments."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from django_redis_locks.core.info import HolderInfo
from django_redis_locks.core.lock import Lock
from django_redis_locks.decorators.names import Namer

__all__ = ["MODES", "Mode", "OnConflict", "OnContention", "Uniqueness", "is_queued"]

Mode = Literal["until_executing", "until_executed", "until_expired", "while_executing"]
MODES: tuple[Mode, ...] = ("until_executing", "until_executed", "until_expired", "while_executing")
#: What an enqueue does when a task with these arguments is queued or running.
OnConflict = Literal["raise", "skip", "reschedule"]
#: What a worker does when it cannot have the name (its queued hold ran out, and another
#: task with these arguments runs).
OnContention = Literal["raise", "skip"]
#: How a queued task's hold is labelled in listings (then the task's path).
QUEUED_LABEL = "queued: "


def is_queued(holder: HolderInfo) -> bool:
    """Whether a unique task's hold is a queued task's (else a running one's)."""
    return (holder.label or "").startswith(QUEUED_LABEL)


@dataclass(frozen=True)
class Uniqueness:
    """One unique task's settings (see :func:`..unique_task`)."""

    namer: Namer
    mode: Mode
    timeout: float | None  # the running task's hold, renewed (None: DEFAULT_TIMEOUT)
    queued_timeout: float  # how long a queued task keeps its name
    on_conflict: OnConflict
    on_contention: OnContention
    skip_result: Any
    using: str | None
    database: str

    def name(self, args: Any, kwargs: dict[str, Any], *, context: bool = False) -> str:
        """The lock name of a task's arguments (without the task context), the same for the
        enqueue and for the worker: made from the arguments as the queue gives them back (a
        tuple comes back a list, see :func:`_as_delivered`). ``context``: the function takes
        the task context first."""
        delivered = tuple(_as_delivered(list(args)))
        kwargs = {key: _as_delivered(value) for key, value in kwargs.items()}
        return self.namer.name((None, *delivered) if context else delivered, kwargs)

    def queued_lock(
        self, name: str, task_path: str, fields: dict[str, str], *, renewed: bool = False
    ) -> Lock:
        """The hold an enqueue takes: not renewed (but while it waits for a commit), it lasts
        ``queued_timeout``. ``fields``: the task's, for listings."""
        return Lock(
            name,
            timeout=self.queued_timeout,
            using=self.using,
            auto_renew=renewed,
            metadata={"label": QUEUED_LABEL + task_path, **fields},
            metric_name=self.namer.key if isinstance(self.namer.key, str) else None,
        )

    def running_lock(self, name: str, fields: dict[str, str]) -> Lock:
        """The hold a worker runs the task under: renewed while it runs. ``fields``: the
        task's name and id, for listings."""
        return Lock(
            name,
            timeout=self.timeout,
            using=self.using,
            auto_renew=True,
            metadata=fields,
            metric_name=self.namer.key if isinstance(self.namer.key, str) else None,
        )


def _as_delivered(value: Any) -> Any:
    """``value`` as a queue gives it back to the worker: a sequence as a list, a mapping's
    keys as JSON makes them (text), bytes as text (Django's task framework decodes them);
    other values as they are (Celery's JSON restores dates, UUIDs, decimals and bytes).
    The same for the enqueue's arguments and for the worker's: applied to what it returns,
    it changes nothing."""
    if isinstance(value, Mapping):
        return {_json_key(key): _as_delivered(item) for key, item in value.items()}
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_as_delivered(item) for item in value]
    return value


def _json_key(key: Any) -> Any:
    if key is None or isinstance(key, bool | int | float):
        return json.dumps(key)  # (JSON turns a key into text: 1 -> "1", None -> "null")
    return key

"""A handed-off hold's ticket, and the record that carries it to the worker of a task.

A ticket names one live lock hold for :func:`..handoff.take_over`: ``"drl1.<fence>.<token>"``
(the token makes it a secret: whoever has it may take the hold). A unique task's ticket
travels from the process that enqueues the task to the worker that runs it in a record at
``KeySpace.ticket(name)`` (a STRING, ``"<task id or -> <ticket>"``, expiring with the hold):
the enqueuer writes it before the task can run, and adds the task id once the task is
enqueued; the worker reads it, takes the hold over and deletes it. When a run of a task that
a broker may deliver again ends, the record ``"<task id> finished"`` says so, for as long as
the running hold's TTL (a second delivery waiting for that hold does not run the task again).
"""

from __future__ import annotations

from typing import Any

from django_redis_locks.core.errors import InvalidArgument, InvalidArgumentType

from .replies import text

__all__ = ["FINISHED", "decode_record", "encode_record", "parse_ticket", "ticket"]

_PREFIX = "drl1."
_NO_TASK = "-"
#: The record's value, in place of a ticket, once the task's run has ended.
FINISHED = "finished"


def ticket(fence: int, token: str) -> str:
    return f"{_PREFIX}{fence}.{token}"


def parse_ticket(value: object) -> tuple[int, str]:
    """(fence, token) of a ticket; InvalidArgument(Type) for anything else."""
    if not isinstance(value, str):
        raise InvalidArgumentType("ticket", f"must be a str, not {type(value).__name__}")
    fence, _, token = value.removeprefix(_PREFIX).partition(".")
    if not value.startswith(_PREFIX) or not fence.isdigit() or len(token) < 16 or " " in token:
        raise InvalidArgument("ticket", "is not a ticket that hand_off() returned")
    return int(fence), token


def encode_record(task_id: str | None, value: str) -> str:
    """The record of ``value`` (a ticket, or FINISHED) handed to the task ``task_id`` (None:
    not known yet: the task is being enqueued)."""
    if task_id is not None and (not task_id or " " in task_id or task_id == _NO_TASK):
        raise InvalidArgument("task_id", f"cannot be recorded: {task_id!r}")
    return f"{task_id or _NO_TASK} {value}"


def decode_record(raw: Any) -> tuple[str | None, str] | None:
    """(task id or None, ticket or FINISHED) of a record read from Redis; None for none (or
    garbage)."""
    if raw is None:
        return None
    task_id, _, value = text(raw).partition(" ")
    if not value:
        return None
    return (None if task_id == _NO_TASK else task_id), value

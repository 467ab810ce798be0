"""What ``manage.py redis_locks`` prints about holds: the listing table, the detail blocks
and the JSON objects.

Text meant for a terminal passes through :func:`shown`, which escapes the control and format
characters that holders' metadata may contain; times are shown in UTC.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django_redis_locks.inspection import HolderInfo, SemaphoreInfo

__all__ = [
    "COLUMNS",
    "holder_block",
    "holder_json",
    "lock_row",
    "semaphore_json",
    "semaphore_rows",
    "shown",
    "table",
    "when",
    "who",
]

COLUMNS = (
    "KIND",
    "NAME",
    "HOLDER",
    "HOST",
    "PID",
    "THREAD/TASK",
    "LABEL",
    "ACQUIRED AT (UTC)",
    "EXPIRES IN",
    "FENCE/SLOTS",
)


def when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def shown(text: str) -> str:
    """``text`` for a terminal: control and format characters (which holders' metadata may
    contain) escaped as ``\\x1b``, ``\\u202e``..., so that they cannot move the cursor, clear
    or retitle the screen, or reorder what is shown."""
    if text.isprintable():
        return text
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in text
    )


def who(hold: HolderInfo) -> str:
    parts = [f"host {shown(hold.host or '?')}", f"pid {hold.pid if hold.pid is not None else '?'}"]
    if hold.label:
        parts.append(shown(hold.label))
    return ", ".join(parts)


def _cells(hold: HolderInfo, slots: str) -> list[str]:
    return [
        hold.kind,
        shown(hold.name),
        hold.holder_id,
        shown(hold.host or "-"),
        "-" if hold.pid is None else str(hold.pid),
        shown(hold.task or hold.thread or "-"),
        shown(hold.label or "-"),
        when(hold.acquired_at),
        f"{hold.ttl:.1f}s",
        slots,
    ]


def lock_row(hold: HolderInfo) -> list[str]:
    return _cells(hold, "-" if hold.fence is None else str(hold.fence))


def semaphore_rows(semaphore: SemaphoreInfo) -> list[list[str]]:
    slots = f"{semaphore.count}/{semaphore.limit}"
    if semaphore.waiting:
        slots += f" +{semaphore.waiting} waiting"
    if not semaphore.holders:
        return [["semaphore", shown(semaphore.name), *["-"] * 7, slots]]
    return [_cells(holder, slots) for holder in semaphore.holders]


def table(rows: Sequence[Sequence[str]], columns: Sequence[str] = COLUMNS) -> str:
    lines = [list(columns), *rows]
    widths = [max(len(row[i]) for row in lines) for i in range(len(columns))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in lines
    )


def holder_block(hold: HolderInfo) -> str:
    known = ("host", "pid", "thread", "task", "label")
    extra = {key: value for key, value in hold.metadata.items() if key not in known}
    lines = [
        ("holder", hold.holder_id),
        ("host", shown(hold.host or "-")),
        ("pid", "-" if hold.pid is None else str(hold.pid)),
        ("thread/task", shown(hold.task or hold.thread or "-")),
        ("label", shown(hold.label or "-")),
        ("acquired at", f"{when(hold.acquired_at)} UTC"),
        ("expires in", f"{hold.ttl:.1f}s (at {when(hold.expires_at)} UTC)"),
    ]
    if hold.ticket is not None:
        lines.append(("ticket", str(hold.ticket)))
    if extra:
        lines.append(("metadata", json.dumps(extra, default=str, sort_keys=True)))
    return "\n".join(f"  {key:<12} {value}" for key, value in lines)


def holder_json(hold: HolderInfo) -> dict[str, Any]:
    data: dict[str, Any] = {
        "kind": hold.kind,
        "name": hold.name,
        "holder_id": hold.holder_id,
        "host": hold.host,
        "pid": hold.pid,
        "thread": hold.thread,
        "task": hold.task,
        "label": hold.label,
        "acquired_at": hold.acquired_at.isoformat(),
        "expires_at": hold.expires_at.isoformat(),
        "ttl": hold.ttl,
        "metadata": hold.metadata,
    }
    if hold.kind == "lock":
        data["fence"] = hold.fence
    else:
        data["ticket"] = hold.ticket
    return data


def semaphore_json(semaphore: SemaphoreInfo) -> dict[str, Any]:
    return {
        "kind": "semaphore",
        "name": semaphore.name,
        "limit": semaphore.limit,
        "count": semaphore.count,
        "waiting": semaphore.waiting,
        "holders": [holder_json(holder) for holder in semaphore.holders],
    }

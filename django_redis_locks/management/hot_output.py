"""What ``manage.py redis_locks hot`` prints: the hot-locks table and its JSON objects."""

from __future__ import annotations

from typing import Any

from django_redis_locks.inspection import HotName
from django_redis_locks.management.listing_output import shown, table

__all__ = ["HOT_COLUMNS", "hot_json", "hot_table"]

HOT_COLUMNS = (
    "KIND",
    "NAME",
    "REFUSED",
    "WAITED",
    "GAVE UP",
    "MEAN WAIT",
    "LONGEST WAIT",
    "HOLDS WAITED FOR",
    "MEAN HOLD",
    "LONGEST HOLD",
)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def hot_table(names: list[HotName]) -> str:
    return table(
        [
            [
                hot.kind,
                shown(hot.name),
                str(hot.refused),
                str(hot.queued),
                str(hot.left),
                _seconds(hot.mean_wait),
                _seconds(hot.longest_wait if hot.waits else None),
                str(hot.holds),
                _seconds(hot.mean_hold),
                _seconds(hot.longest_hold if hot.holds else None),
            ]
            for hot in names
        ],
        HOT_COLUMNS,
    )


def hot_json(hot: HotName) -> dict[str, Any]:
    return {
        "kind": hot.kind,
        "name": hot.name,
        "window": hot.window,
        "refused": hot.refused,
        "queued": hot.queued,
        "left": hot.left,
        "waits": hot.waits,
        "wait_seconds": hot.wait_seconds,
        "mean_wait": hot.mean_wait,
        "longest_wait": hot.longest_wait if hot.waits else None,
        "holds": hot.holds,
        "hold_seconds": hot.hold_seconds,
        "mean_hold": hot.mean_hold,
        "longest_hold": hot.longest_hold if hot.holds else None,
    }

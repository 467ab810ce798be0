"""What the list shows, from its query: the kind, name prefix, filters, order and page.

The list reads a window of at most ``scan_limit`` live entries (the registry's order), filters
and sorts that window, and shows it a page at a time; when more are live than the window holds,
it says "at least" and links to the next window. Django-free, apart from reading the query.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django_redis_locks.core.info import HolderInfo, SemaphoreInfo

__all__ = [
    "SORTS",
    "Entry",
    "ListState",
    "descending",
    "facets",
    "filtered",
    "holders_of",
    "sorted_entries",
]

Entry = HolderInfo | SemaphoreInfo

#: The orders of the list: each key's first click, and what it sorts by.
SORTS: dict[str, str] = {
    "name": "name, A to Z",
    "age": "held longest first",
    "expiry": "expiring soonest first",
    "waiters": "most waiting first",
}
#: The query parameters that make up the list's state, kept across refreshes, pages and
#: releases.
PARAMS = ("kind", "q", "host", "pid", "label", "o", "p", "cursor")


@dataclass(frozen=True)
class ListState:
    """The list's query, checked: anything unknown falls back to the default."""

    kind: str = "lock"
    q: str = ""
    host: str = ""
    pid: str = ""
    label: str = ""
    o: str = "name"
    p: int = 1
    cursor: str = ""

    @classmethod
    def from_query(cls, query: Mapping[str, Any]) -> ListState:
        def get(key: str) -> str:
            return str(query.get(key) or "").strip()

        order = get("o")
        page = get("p")
        pid = get("pid")
        return cls(
            kind=get("kind") if get("kind") in ("lock", "semaphore") else "lock",
            q=get("q"),
            host=get("host")[:255],
            pid=pid if pid.isdigit() and len(pid) <= 10 else "",
            label=get("label")[:200],
            o=order if order.removeprefix("-") in SORTS else "name",
            p=int(page) if page.isdigit() and 0 < len(page) <= 6 and int(page) > 0 else 1,
            cursor=get("cursor"),
        )

    def params(self, **changes: Any) -> dict[str, str]:
        """The query of this state with ``changes``, defaults left out."""
        state = dataclasses.replace(self, **changes)
        default = ListState()
        return {
            key: str(getattr(state, key))
            for key in PARAMS
            if getattr(state, key) != getattr(default, key)
        }

    @property
    def filtering(self) -> bool:
        return bool(self.host or self.pid or self.label)

    @property
    def process(self) -> tuple[str, int] | None:
        """The process the list is filtered to (host and pid), if it is."""
        return (self.host, int(self.pid)) if self.host and self.pid else None


def holders_of(entry: Entry) -> tuple[HolderInfo, ...]:
    return entry.holders if isinstance(entry, SemaphoreInfo) else (entry,)


def _matches(hold: HolderInfo, state: ListState) -> bool:
    return (
        (not state.host or hold.host == state.host)
        and (not state.pid or hold.pid == int(state.pid))
        and (not state.label or state.label.casefold() in (hold.label or "").casefold())
    )


def filtered(entries: list[Entry], state: ListState) -> list[Entry]:
    """The entries with a hold that matches the filters; a semaphore keeps only its matching
    holders."""
    if not state.filtering:
        return entries
    kept: list[Entry] = []
    for entry in entries:
        if isinstance(entry, SemaphoreInfo):
            holders = tuple(h for h in entry.holders if _matches(h, state))
            if holders:
                kept.append(dataclasses.replace(entry, holders=holders))
        elif _matches(entry, state):
            kept.append(entry)
    return kept


def _waiting(entry: Entry) -> int:
    return entry.waiting


def _held(entry: Entry) -> float:
    return max((h.held for h in holders_of(entry)), default=0.0)


def _expiry(entry: Entry) -> float:
    """Seconds to the soonest expiry; a renewed hold does not run out, so it comes last."""
    return min(
        (float("inf") if h.renewed else h.ttl for h in holders_of(entry)), default=float("inf")
    )


_KEYS: dict[str, tuple[Callable[[Entry], Any], bool]] = {
    "name": (lambda entry: entry.name, False),
    "age": (_held, True),
    "expiry": (_expiry, False),
    "waiters": (_waiting, True),
}


def descending(order: str) -> bool:
    """Whether ``order`` puts larger values first."""
    return _KEYS[order.removeprefix("-")][1] != order.startswith("-")


def sorted_entries(entries: list[Entry], order: str) -> list[Entry]:
    """``entries`` in ``order`` (a key of SORTS, "-" first to reverse it), ties by name."""
    key = _KEYS[order.removeprefix("-")][0]
    by_name = sorted(entries, key=lambda entry: entry.name)
    return sorted(by_name, key=key, reverse=descending(order))


def facets(entries: list[Entry], most: int = 20) -> dict[str, list[tuple[str, int]]]:
    """The hosts, processes ("host pid") and labels of the holders in ``entries``, most
    frequent first, at most ``most`` of each, with how many holds each has."""
    hosts: Counter[str] = Counter()
    processes: Counter[str] = Counter()
    labels: Counter[str] = Counter()
    for entry in entries:
        for hold in holders_of(entry):
            hosts[hold.host or ""] += 1
            if hold.pid is not None:
                processes[f"{hold.host or ''} {hold.pid}"] += 1
            if hold.label:
                labels[hold.label] += 1
    return {
        "host": hosts.most_common(most),
        "process": processes.most_common(most),
        "label": labels.most_common(most),
    }

"""The list of live locks or semaphores: filtered, sorted, a page at a time, refreshed in
place."""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import urlencode

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from django_redis_locks.connection import get_backend
from django_redis_locks.core.errors import InvalidArgument, InvalidArgumentType, LockBackendError
from django_redis_locks.core.info import HolderInfo
from django_redis_locks.core.registry import MAX_PAGE_SIZE, list_locks, list_semaphores
from django_redis_locks.unique.records import queued_task_id
from django_redis_locks.unique.spec import is_queued

from .base import KINDS, AdminPages, Crumb
from .listing import SORTS, Entry, ListState, descending, facets, filtered, sorted_entries
from .rows import lines

__all__ = ["LiveList"]

#: The filters of the sidebar: (query parameter, title, facet).
FILTERS = (
    ("host", "host", "host"),
    ("process", "process", "process"),
    ("label", "caller", "label"),
)


class LiveList(AdminPages):
    """The list view and its rows."""

    #: Most live entries the list reads (then filters, sorts and pages): past it, the total is
    #: "at least" and the next ones are a window further.
    scan_limit = MAX_PAGE_SIZE

    def live_view(self, request: HttpRequest) -> HttpResponse:
        """The live locks or semaphores: ``?kind=``, ``?q=`` (name prefix), ``?host=``,
        ``?pid=``, ``?label=`` (filters), ``?o=`` (order), ``?p=`` (page), ``?cursor=`` (a
        later window).

        With ``?rows=1`` only the rows (and their footer), which the page's script fetches
        every ``refresh_seconds`` to stay live.
        """
        if not self.has_view_permission(request):
            raise PermissionDenied
        state = ListState.from_query(request.GET)
        plural = KINDS[state.kind].lower()
        entries: list[Entry] = []
        next_cursor: str | None = None
        error = None
        try:
            lister: Any = list_locks if state.kind == "lock" else list_semaphores
            window = lister(state.q, cursor=state.cursor or None, count=self.scan_limit)
            entries, next_cursor = list(window.items), window.cursor
        except (InvalidArgument, InvalidArgumentType) as exc:
            error = f"Cannot list {plural}: {exc}"
        except LockBackendError as exc:
            error = (
                f"Redis could not be reached, so the live {plural} cannot be "
                f"shown (this page tries again every {self.refresh_seconds} s): {exc}"
            )
        read = len(entries)
        shown = sorted_entries(filtered(entries, state), state.o)
        pages = max(1, -(-len(shown) // self.list_per_page))
        number = min(state.p, pages)
        start = (number - 1) * self.list_per_page
        can_release = self.has_force_release_permission(request)
        here = urlencode(state.params(p=number))

        def release_url(hold: HolderInfo) -> str | None:
            if not can_release:
                return None
            return self._url(
                "release", kind=hold.kind, name=hold.name, holder=hold.holder_id, list=here
            )

        rows = lines(_named_queued_tasks(shown[start : start + self.list_per_page]), release_url)
        title = f"Live {plural}"
        context = {
            **self._context(request, title, self._crumbs(Crumb(title))),
            "kind": state.kind,
            "state": state,
            "kinds": [
                {
                    "value": value,
                    "label": label,
                    "selected": value == state.kind,
                    "url": self._list_url(state, kind=value, p=1, cursor=""),
                }
                for value, label in KINDS.items()
            ],
            "hot_url": self._url("hot"),
            "query": state.q,
            "hidden": {k: v for k, v in state.params(p=1).items() if k != "q"},
            "rows": rows,
            "count": len(shown[start : start + self.list_per_page]),
            "total": len(shown),
            "read": read,
            "complete": next_cursor is None and not state.cursor,
            "window_url": self._list_url(state, cursor=next_cursor, p=1) if next_cursor else None,
            "scan_limit": self.scan_limit,
            "next_url": self._list_url(state, p=number + 1) if number < pages else None,
            "previous_url": self._list_url(state, p=number - 1) if number > 1 else None,
            "first_url": self._list_url(state, p=1, cursor="")
            if number > 1 or state.cursor
            else None,
            "page_number": number,
            "pages": pages,
            "columns": self._columns(state),
            "filters": self._filters(state, entries),
            "clear_url": self._list_url(state, host="", pid="", label="", p=1)
            if state.filtering
            else None,
            "bulk_url": self._url(
                "release_process",
                host=state.host,
                pid=state.pid,
                list=urlencode(state.params()),
            )
            if can_release and state.process and shown
            else None,
            "can_release": can_release,
            "redis_error": error,
            "read_at": timezone.now(),
            "refresh_seconds": self.refresh_seconds,
            "refresh_url": self._list_url(state, p=number, rows="1"),
        }
        if request.GET.get("rows") == "1":
            response = TemplateResponse(request, self.rows_template, context)
            response["X-DRL-Rows"] = "1"  # the script replaces the rows with this only
            response["Cache-Control"] = "no-store"
            return response
        return TemplateResponse(request, self.list_template, context)

    def _list_url(self, state: ListState, **changes: Any) -> str:
        extra = {"rows": changes.pop("rows")} if "rows" in changes else {}
        return self._url("changelist", **state.params(**changes), **extra)

    def _columns(self, state: ListState) -> dict[str, dict[str, Any]]:
        """Each sortable column's link (its first order, or the reverse when it is the
        current one) and whether it is the current order, and which way."""
        current = state.o.removeprefix("-")
        columns = {}
        for key, meaning in SORTS.items():
            sorted_here = key == current
            reverse = sorted_here and not state.o.startswith("-")
            columns[key] = {
                "url": self._list_url(state, o=f"-{key}" if reverse else key, p=1),
                "sorted": sorted_here,
                "reversed": state.o.startswith("-"),
                "descending": descending(state.o),
                "title": f"Sort by {meaning}" + (" (click again to reverse)" if reverse else ""),
            }
        return columns

    def _filters(self, state: ListState, entries: list[Entry]) -> list[dict[str, Any]]:
        """The sidebar's filters: the hosts, processes and callers of the holds read."""
        found = facets(entries)
        selected = {
            "host": state.host,
            "process": f"{state.host} {state.pid}" if state.process else "",
            "label": state.label,
        }
        result = []
        for param, title, facet in FILTERS:
            choices = [
                {
                    "display": "All",
                    "selected": not selected[param],
                    "url": self._list_url(state, p=1, **_choice(param, None)),
                }
            ]
            for value, holds in found[facet]:
                choices.append(
                    {
                        "display": f"{value or '?'} ({holds})",
                        "selected": value == selected[param],
                        "url": self._list_url(state, p=1, **_choice(param, value)),
                    }
                )
            result.append({"title": title, "choices": choices})
        return result


def _choice(param: str, value: str | None) -> dict[str, str]:
    """The query changes that choose ``value`` (None: all) in the filter ``param``."""
    if param == "process":
        if value is None:
            return {"pid": ""}
        host, _, pid = value.rpartition(" ")
        return {"host": host, "pid": pid}
    return {param: value or ""}


def _named_queued_tasks(entries: list[Entry]) -> list[Entry]:
    """The entries, each queued unique Django task's hold with its task id, which its ticket
    record holds (one read per such hold on the page)."""
    return [_named(entry) for entry in entries]


def _named(entry: Entry) -> Entry:
    if not (
        isinstance(entry, HolderInfo)
        and entry.django_task_name
        and not entry.django_task_id
        and is_queued(entry)
    ):
        return entry
    try:
        task_id = queued_task_id(get_backend(), entry)
    except LockBackendError:
        return entry
    if task_id is None:
        return entry
    return dataclasses.replace(entry, metadata={**entry.metadata, "django_task_id": task_id})

"""The list of live locks or semaphores: one page of rows, refreshed in place."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from django_redis_locks.core.errors import InvalidArgument, InvalidArgumentType, LockBackendError
from django_redis_locks.core.info import HolderInfo, Page, SemaphoreInfo
from django_redis_locks.core.registry import list_locks, list_semaphores

from .base import KINDS, AdminPages, Crumb

__all__ = ["LiveList"]


class LiveList(AdminPages):
    """The list view and its rows."""

    # -- the list ------------------------------------------------------------------------
    def live_view(self, request: HttpRequest) -> HttpResponse:
        """One page of live locks or semaphores; ``?kind=``, ``?q=`` (name prefix), ``?cursor=``.

        With ``?rows=1`` only the rows (and their footer), which the page's script fetches
        every ``refresh_seconds`` to stay live.
        """
        if not self.has_view_permission(request):
            raise PermissionDenied
        kind = request.GET.get("kind", "lock")
        if kind not in KINDS:
            kind = "lock"
        query = request.GET.get("q", "").strip()
        cursor = request.GET.get("cursor") or None
        page: Page[Any] = Page(items=[], cursor=None)
        error = None
        try:
            lister = list_locks if kind == "lock" else list_semaphores
            page = lister(query, cursor=cursor, count=self.list_per_page)
        except (InvalidArgument, InvalidArgumentType) as exc:
            error = f"Cannot list {KINDS[kind].lower()}: {exc}"
        except LockBackendError as exc:
            error = (
                f"Redis could not be reached, so the live {KINDS[kind].lower()} cannot be "
                f"shown (this page tries again every {self.refresh_seconds} s): {exc}"
            )
        can_release = self.has_force_release_permission(request)
        rows = (
            [self._lock_row(hold, can_release) for hold in page.items]
            if kind == "lock"
            else [self._semaphore_row(info, can_release) for info in page.items]
        )
        title = f"Live {KINDS[kind].lower()}"
        context = {
            **self._context(request, title, self._crumbs(Crumb(title))),
            "kind": kind,
            "kinds": [
                {
                    "value": value,
                    "label": label,
                    "selected": value == kind,
                    "url": self._url("changelist", kind=value, q=query),
                }
                for value, label in KINDS.items()
            ],
            "query": query,
            "rows": rows,
            "count": len(rows),
            "next_url": self._url("changelist", kind=kind, q=query, cursor=page.cursor or "")
            if page.cursor
            else None,
            "first_url": self._url("changelist", kind=kind, q=query) if cursor else None,
            "can_release": can_release,
            "redis_error": error,
            "read_at": timezone.now(),
            "refresh_seconds": self.refresh_seconds,
            "refresh_url": self._url(
                "changelist", kind=kind, q=query, cursor=cursor or "", rows="1"
            ),
        }
        if request.GET.get("rows") == "1":
            response = TemplateResponse(request, self.rows_template, context)
            response["X-DRL-Rows"] = "1"  # the script replaces the rows with this only
            response["Cache-Control"] = "no-store"
            return response
        return TemplateResponse(request, self.list_template, context)

    def _holder(self, hold: HolderInfo, can_release: bool) -> dict[str, Any]:
        return {
            "info": hold,
            "thread": (hold.thread or "").split(" (", 1)[0],  # without the thread ident
            "ttl_ms": int(hold.ttl * 1000),
            "release_url": self._url(
                "release", kind=hold.kind, name=hold.name, holder=hold.holder_id
            )
            if can_release
            else None,
        }

    def _lock_row(self, hold: HolderInfo, can_release: bool) -> dict[str, Any]:
        return {"name": hold.name, "holders": [self._holder(hold, can_release)]}

    def _semaphore_row(self, info: SemaphoreInfo, can_release: bool) -> dict[str, Any]:
        return {
            "name": info.name,
            "limit": info.limit,
            "count": info.count,
            "waiting": info.waiting,
            "holders": [self._holder(hold, can_release) for hold in info.holders],
        }

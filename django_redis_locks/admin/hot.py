"""The "Hot locks" page: the most contended locks and semaphores over the last 5 or 60
minutes, from the figures the scripts keep where contention happens (see
:mod:`django_redis_locks.core.hot`), refreshed in place like the live list."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from django_redis_locks.core.errors import LockBackendError
from django_redis_locks.core.hot import WINDOWS, HotName, hot_names

from .base import AdminPages, Crumb

__all__ = ["HotList"]

#: The windows offered, by query value: (seconds, label).
HOT_WINDOWS = {"5m": (WINDOWS[0], "Last 5 minutes"), "60m": (WINDOWS[1], "Last 60 minutes")}


class HotList(AdminPages):
    """The hot-locks view."""

    #: How many names the page shows, most contended first.
    hot_count = 50
    hot_template = "admin/django_redis_locks/livelock/hot_list.html"
    hot_rows_template = "admin/django_redis_locks/livelock/hot_rows.html"

    def hot_view(self, request: HttpRequest) -> HttpResponse:
        """``?window=5m`` (default) or ``60m``; ``?rows=1``: only the rows, for the refresh."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        window = request.GET.get("window", "5m")
        if window not in HOT_WINDOWS:
            window = "5m"
        seconds, label = HOT_WINDOWS[window]
        found: list[HotName] = []
        error = None
        try:
            found = hot_names(seconds, count=self.hot_count)
        except LockBackendError as exc:
            error = (
                "Redis could not be reached, so the contention figures cannot be shown (this "
                f"page tries again every {self.refresh_seconds} s): {exc}"
            )
        title = "Hot locks"
        context = {
            **self._context(request, title, self._crumbs(Crumb(title))),
            "window": window,
            "window_label": label,
            "windows": [
                {
                    "value": value,
                    "label": text,
                    "selected": value == window,
                    "url": self._url("hot", window=value),
                }
                for value, (_, text) in HOT_WINDOWS.items()
            ],
            "rows": [self._hot_row(hot) for hot in found],
            "redis_error": error,
            "read_at": timezone.now(),
            "refresh_seconds": self.refresh_seconds,
            "refresh_url": self._url("hot", window=window, rows="1"),
            "hot_url": self._url("hot", window=window),
            "live_urls": [
                {"label": "Locks", "url": self._url("changelist", kind="lock")},
                {"label": "Semaphores", "url": self._url("changelist", kind="semaphore")},
            ],
        }
        if request.GET.get("rows") == "1":
            response = TemplateResponse(request, self.hot_rows_template, context)
            response["X-DRL-Rows"] = "1"
            response["Cache-Control"] = "no-store"
            return response
        return TemplateResponse(request, self.hot_template, context)

    def _hot_row(self, hot: HotName) -> dict[str, Any]:
        return {
            "hot": hot,
            "live_url": self._url("changelist", kind=hot.kind, q=hot.name),
        }

"""What every page of the live admin shares: its permissions, URLs, breadcrumbs and context."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import django
from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse

from django_redis_locks.models import LiveLock

__all__ = ["KINDS", "AdminPages", "Crumb"]

KINDS = {"lock": "Locks", "semaphore": "Semaphores"}


@dataclass(frozen=True)
class Crumb:
    title: str
    url: str | None = None


if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[LiveLock]
else:  # ModelAdmin is generic for type checkers only
    _ModelAdmin = admin.ModelAdmin


class AdminPages(_ModelAdmin):
    """Permissions, URLs and page context of the live admin's views."""

    list_per_page = 50
    #: How often the list page refreshes its rows by itself (seconds).
    refresh_seconds = 3
    list_template = "admin/django_redis_locks/livelock/live_list.html"
    rows_template = "admin/django_redis_locks/livelock/live_rows.html"
    release_template = "admin/django_redis_locks/livelock/force_release.html"

    # -- permissions ---------------------------------------------------------------------
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _has_perm(request, f"{self.opts.app_label}.view_livelock")

    def has_force_release_permission(self, request: HttpRequest) -> bool:
        return _has_perm(request, f"{self.opts.app_label}.force_release_livelock")

    # -- URLs and context ----------------------------------------------------------------
    def _url(self, view: str, **query: str) -> str:
        url = reverse(f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_{view}")
        query = {key: value for key, value in query.items() if value}
        return f"{url}?{urlencode(query)}" if query else url

    def _crumbs(self, *last: Crumb) -> list[Crumb]:
        site = self.admin_site.name
        return [
            Crumb("Home", reverse(f"{site}:index")),
            Crumb(
                str(self.opts.app_config.verbose_name),
                reverse(f"{site}:app_list", kwargs={"app_label": self.opts.app_label}),
            ),
            *last,
        ]

    def _context(self, request: HttpRequest, title: str, crumbs: list[Crumb]) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "crumbs": crumbs,
            # Django 6.1 marks breadcrumbs up as a list (<ol>); before, as a <div>.
            "crumbs_as_list": django.VERSION >= (6, 1),
            # Django 6.0 puts a changelist's filters (a <search>) first inside its form
            # container; before, they follow the container (a <nav>).
            "filters_inside": django.VERSION >= (6, 0),
        }


def _has_perm(request: HttpRequest, permission: str) -> bool:
    user: Any = request.user  # a user model with PermissionsMixin, or AnonymousUser
    return bool(user.has_perm(permission))

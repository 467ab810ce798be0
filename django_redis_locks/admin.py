"""The admin page of live locks and semaphore holders, with a guarded force-release.

It hangs off the unmanaged :class:`~django_redis_locks.models.LiveLock` model, so it appears
in the admin index under the app and uses real permissions (``view_livelock`` to see it,
``force_release_livelock`` to release). Every view checks its own permission; URLs and
context come from ``self.admin_site``, so it works on custom admin sites too. Everything it
shows comes from :mod:`django_redis_locks.inspection`, a page at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import django
from django.contrib import admin, messages
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone

from .conf import get_config
from .core.errors import InvalidArgument, InvalidArgumentType, LockBackendError
from .core.info import HolderInfo, Page, SemaphoreInfo
from .core.protocol.holder import check_holder_id
from .core.registry import force_release, get_lock, get_semaphore, list_locks, list_semaphores
from .models import LiveLock

__all__ = ["LiveLockAdmin"]

KINDS = {"lock": "Locks", "semaphore": "Semaphores"}


@dataclass(frozen=True)
class Crumb:
    title: str
    url: str | None = None


if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[LiveLock]
else:  # ModelAdmin is generic for type checkers only
    _ModelAdmin = admin.ModelAdmin


@admin.register(LiveLock)
class LiveLockAdmin(_ModelAdmin):
    """Lists live locks and semaphores from Redis; force-releases one hold at a time."""

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

    # -- URLs ----------------------------------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "",
                self.admin_site.admin_view(self.live_view),
                name="{}_{}_changelist".format(*info),
            ),
            path(
                "release/",
                self.admin_site.admin_view(self.release_view),
                name="{}_{}_release".format(*info),
            ),
        ]

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
        }

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

    # -- force release -------------------------------------------------------------------
    def release_view(self, request: HttpRequest) -> HttpResponse:
        """GET: the confirmation page. POST (with CSRF): release exactly the hold shown."""
        if not self.has_force_release_permission(request):
            raise PermissionDenied
        source = request.POST if request.method == "POST" else request.GET
        kind = source.get("kind", "lock")
        name = source.get("name", "")
        holder_id = source.get("holder", "")
        back = self._url("changelist", kind=kind if kind in KINDS else "lock")
        if kind not in KINDS:
            messages.error(request, f"Unknown kind {kind!r}.")
            return HttpResponseRedirect(back)
        try:
            hold = _find_hold(kind, name, holder_id)
        except (InvalidArgument, InvalidArgumentType) as exc:
            messages.error(request, f"Cannot release: {exc}")
            return HttpResponseRedirect(back)
        except LockBackendError as exc:
            messages.error(request, f"Redis could not be reached: {exc}")
            return HttpResponseRedirect(back)
        if hold is None:
            messages.warning(
                request,
                f"The {kind} {name!r} is no longer held by {holder_id}: nothing to release.",
            )
            return HttpResponseRedirect(back)
        if request.method == "POST":
            return self._release(request, hold, back)
        title = f"Force-release the {kind} {name!r}?"
        context = {
            **self._context(
                request,
                title,
                self._crumbs(Crumb(f"Live {KINDS[kind].lower()}", back), Crumb("Force release")),
            ),
            "hold": hold,
            "ttl_ms": int(hold.ttl * 1000),
            "back_url": back,
            "view_on_lost": get_config().view_on_lock_lost,
        }
        return TemplateResponse(request, self.release_template, context)

    def _release(self, request: HttpRequest, hold: HolderInfo, back: str) -> HttpResponse:
        actor = f"admin:{request.user.get_username()}"
        try:
            released = force_release(hold.name, hold.holder_id, kind=hold.kind, by=actor)
        except LockBackendError as exc:
            messages.error(request, f"Redis could not be reached: {exc}")
            return HttpResponseRedirect(back)
        if not released:
            messages.warning(
                request,
                f"The {hold.kind} {hold.name!r} was no longer held by {hold.holder_id}: "
                "nothing was released.",
            )
            return HttpResponseRedirect(back)
        where = f"{hold.host or '?'} pid {hold.pid if hold.pid is not None else '?'}"
        LogEntry.objects.create(
            user_id=request.user.pk or 0,  # admin views only serve logged-in staff
            content_type_id=ContentType.objects.get_for_model(LiveLock).pk,
            object_id=f"{hold.kind}:{hold.name}"[:200],
            object_repr=f"{hold.kind} {hold.name}"[:200],
            action_flag=DELETION,
            change_message=(
                f"Force-released the {hold.kind} {hold.name!r} held by {hold.holder_id} "
                f"({where}, {hold.label or 'no label'})."
            ),
        )
        messages.success(
            request,
            f"Released the {hold.kind} {hold.name!r} held by {hold.holder_id} ({where}). "
            "Its holder will find out at its next check.",
        )
        return HttpResponseRedirect(back)


def _has_perm(request: HttpRequest, permission: str) -> bool:
    user: Any = request.user  # a user model with PermissionsMixin, or AnonymousUser
    return bool(user.has_perm(permission))


def _find_hold(kind: str, name: str, holder_id: str) -> HolderInfo | None:
    """The live hold ``holder_id`` of ``name``, or None when it is gone."""
    check_holder_id(holder_id)
    if kind == "lock":
        hold = get_lock(name)
        return hold if hold is not None and hold.holder_id == holder_id else None
    info = get_semaphore(name)
    holders = info.holders if info is not None else ()
    return next((h for h in holders if h.holder_id == holder_id), None)

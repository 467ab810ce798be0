"""Force release: a confirmation page, then the release of exactly the hold shown, audited."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse

from django_redis_locks.conf import get_config
from django_redis_locks.core.errors import InvalidArgument, InvalidArgumentType, LockBackendError
from django_redis_locks.core.info import HolderInfo
from django_redis_locks.core.protocol.holder import check_holder_id
from django_redis_locks.core.registry import force_release, get_lock, get_semaphore
from django_redis_locks.models import LiveLock

from .base import KINDS, AdminPages, Crumb

__all__ = ["Release"]


class Release(AdminPages):
    """The force-release views."""

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


def _find_hold(kind: str, name: str, holder_id: str) -> HolderInfo | None:
    """The live hold ``holder_id`` of ``name``, or None when it is gone."""
    check_holder_id(holder_id)
    if kind == "lock":
        hold = get_lock(name)
        return hold if hold is not None and hold.holder_id == holder_id else None
    info = get_semaphore(name)
    holders = info.holders if info is not None else ()
    return next((h for h in holders if h.holder_id == holder_id), None)

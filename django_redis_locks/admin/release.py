"""Force release: a confirmation page, then the release of exactly the holds shown, audited.

One hold (``release/``), or every hold of one process (``release/process/``: for a process
that died with holds, by host and pid). Either way the POST releases a hold only if it is
still held by the holder id the page showed, writes one LogEntry per hold released, and sends
the user back to the list as it was (``list``: its query).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

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
from django_redis_locks.core.registry import (
    MAX_PAGE_SIZE,
    force_release,
    get_lock,
    get_semaphore,
    list_locks,
    list_semaphores,
)
from django_redis_locks.models import LiveLock

from .base import KINDS, AdminPages, Crumb
from .listing import ListState, filtered, holders_of
from .rows import duration

__all__ = ["Release"]


class Release(AdminPages):
    """The force-release views."""

    process_release_template = "admin/django_redis_locks/livelock/force_release_process.html"

    def release_view(self, request: HttpRequest) -> HttpResponse:
        """GET: the confirmation page. POST (with CSRF): release exactly the hold shown."""
        if not self.has_force_release_permission(request):
            raise PermissionDenied
        source = request.POST if request.method == "POST" else request.GET
        kind = source.get("kind", "lock")
        name = source.get("name", "")
        holder_id = source.get("holder", "")
        listed = source.get("list", "")
        back = self._back(listed, kind if kind in KINDS else "lock")
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
            "held": duration(hold.held),
            "held_ms": int(hold.held * 1000),
            "back_url": back,
            "list": listed,
            "view_on_lost": get_config().view_on_lock_lost,
        }
        return TemplateResponse(request, self.release_template, context)

    def release_process_view(self, request: HttpRequest) -> HttpResponse:
        """GET: every hold of the process ``host`` + ``pid``, to confirm. POST (with CSRF):
        release those of the holds listed (``hold``: "<kind> <holder id> <name>") that are
        still held by the same holder of that process."""
        if not self.has_force_release_permission(request):
            raise PermissionDenied
        source = request.POST if request.method == "POST" else request.GET
        listed = source.get("list", "")
        back = self._back(listed, "lock")
        process = ListState.from_query({"host": source.get("host"), "pid": source.get("pid")})
        if process.process is None:
            messages.error(request, "Cannot release a process's holds: give its host and pid.")
            return HttpResponseRedirect(back)
        host, pid = process.process
        try:
            if request.method == "POST":
                return self._release_all(request, host, pid, source.getlist("hold"), back)
            holds, complete = _holds_of(process)
        except LockBackendError as exc:
            messages.error(request, f"Redis could not be reached: {exc}")
            return HttpResponseRedirect(back)
        if not holds:
            messages.warning(request, f"Nothing to release: {host} pid {pid} holds nothing now.")
            return HttpResponseRedirect(back)
        title = f"Force-release every hold of {host} pid {pid}?"
        context = {
            **self._context(
                request, title, self._crumbs(Crumb("Live locks", back), Crumb("Force release"))
            ),
            "host": host,
            "pid": pid,
            "holds": [
                {"hold": hold, "held": duration(hold.held), "value": _hold_value(hold)}
                for hold in holds
            ],
            "complete": complete,
            "searched": MAX_PAGE_SIZE,
            "back_url": back,
            "list": listed,
        }
        return TemplateResponse(request, self.process_release_template, context)

    def _back(self, listed: str, kind: str) -> str:
        """The list as it was (its query ``listed``), or the list of ``kind``."""
        state = ListState.from_query(dict(parse_qsl(listed)) if listed else {"kind": kind})
        return self._url("changelist", **state.params())

    def _release(self, request: HttpRequest, hold: HolderInfo, back: str) -> HttpResponse:
        try:
            released = _release_and_audit(request, hold)
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
        messages.success(
            request,
            f"Released the {hold.kind} {hold.name!r} held by {hold.holder_id} ({_where(hold)}). "
            "Its holder will find out at its next check.",
        )
        return HttpResponseRedirect(back)

    def _release_all(
        self, request: HttpRequest, host: str, pid: int, posted: list[str], back: str
    ) -> HttpResponse:
        released: list[HolderInfo] = []
        gone = 0
        for value in posted:
            kind, _, rest = value.partition(" ")
            holder_id, _, name = rest.partition(" ")
            try:
                hold = _find_hold(kind, name, holder_id) if kind in KINDS else None
            except (InvalidArgument, InvalidArgumentType):
                hold = None
            if hold is None or (hold.host, hold.pid) != (host, pid):
                gone += 1
            elif _release_and_audit(request, hold):
                released.append(hold)
            else:
                gone += 1
        if released:
            names = ", ".join(f"{hold.kind} {hold.name!r}" for hold in released)
            messages.success(
                request,
                f"Released {len(released)} hold{'s' if len(released) != 1 else ''} of "
                f"{host} pid {pid}: {names}.",
            )
        if gone:
            messages.warning(
                request,
                f"{gone} of the holds shown {'was' if gone == 1 else 'were'} no longer held "
                f"by {host} pid {pid}: nothing was released for {'it' if gone == 1 else 'them'}.",
            )
        return HttpResponseRedirect(back)


def _where(hold: HolderInfo) -> str:
    return f"{hold.host or '?'} pid {hold.pid if hold.pid is not None else '?'}"


def _release_and_audit(request: HttpRequest, hold: HolderInfo) -> bool:
    """Release ``hold`` if its holder still holds it; audit it with one LogEntry."""
    actor = f"admin:{request.user.get_username()}"
    if not force_release(hold.name, hold.holder_id, kind=hold.kind, by=actor):
        return False
    LogEntry.objects.create(
        user_id=request.user.pk or 0,  # admin views only serve logged-in staff
        content_type_id=ContentType.objects.get_for_model(LiveLock).pk,
        object_id=f"{hold.kind}:{hold.name}"[:200],
        object_repr=f"{hold.kind} {hold.name}"[:200],
        action_flag=DELETION,
        change_message=(
            f"Force-released the {hold.kind} {hold.name!r} held by {hold.holder_id} "
            f"({_where(hold)}, {hold.label or 'no label'})."
        ),
    )
    return True


def _hold_value(hold: HolderInfo) -> str:
    return f"{hold.kind} {hold.holder_id} {hold.name}"


def _holds_of(process: ListState) -> tuple[list[HolderInfo], bool]:
    """The holds of ``process`` among the first MAX_PAGE_SIZE live locks and semaphores, and
    whether those were all of them."""
    holds: list[HolderInfo] = []
    complete = True
    listers: Any = (list_locks, list_semaphores)
    for lister in listers:
        page = lister("", count=MAX_PAGE_SIZE)
        complete = complete and page.cursor is None
        for entry in filtered(list(page.items), process):
            holds.extend(holders_of(entry))
    return holds, complete


def _find_hold(kind: str, name: str, holder_id: str) -> HolderInfo | None:
    """The live hold ``holder_id`` of ``name``, or None when it is gone."""
    check_holder_id(holder_id)
    if kind == "lock":
        hold = get_lock(name)
        return hold if hold is not None and hold.holder_id == holder_id else None
    info = get_semaphore(name)
    holders = info.holders if info is not None else ()
    return next((h for h in holders if h.holder_id == holder_id), None)

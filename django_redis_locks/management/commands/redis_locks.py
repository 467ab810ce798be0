"""``manage.py redis_locks``: list, show and force-release live locks and semaphores.

::

    manage.py redis_locks list [--prefix P] [--kind lock|semaphore|all] [--json]
    manage.py redis_locks show NAME [--kind lock|semaphore|all] [--json]
    manage.py redis_locks release NAME [--holder ID] [--kind lock|semaphore] [--yes] [--json]

Each takes ``--using ALIAS`` (default: the configured ``CACHE_ALIAS``). Built on
:mod:`django_redis_locks.inspect`; holds are named by their holder ids, never by tokens.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import sys
from argparse import ArgumentParser
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_redis_locks.core.errors import LockError
from django_redis_locks.core.holder import HOLDER_ID_LENGTH
from django_redis_locks.inspect import (
    HolderInfo,
    Page,
    SemaphoreInfo,
    force_release,
    get_lock,
    get_semaphore,
    list_locks,
    list_semaphores,
)

T = TypeVar("T")
Kind = Literal["lock", "semaphore"]
KINDS: tuple[Kind, ...] = ("lock", "semaphore")
PAGE_SIZE = 500
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


class Command(BaseCommand):
    help = "List, show and force-release live Redis locks and semaphores."
    requires_system_checks: tuple[str, ...] = ()  # an operator's tool: works while checks fail

    def add_arguments(self, parser: ArgumentParser) -> None:
        assert isinstance(parser, CommandParser)
        actions = parser.add_subparsers(
            dest="action", required=True, metavar="{list,show,release}", parser_class=CommandParser
        )

        listing = actions.add_parser("list", help="List what is held now, sorted by name.")
        listing.add_argument("--prefix", default="", help="Only names that start with PREFIX.")
        listing.add_argument("--kind", choices=(*KINDS, "all"), default="all")
        self._common(listing)

        show = actions.add_parser("show", help="Show one lock and/or semaphore in detail.")
        show.add_argument("name")
        show.add_argument("--kind", choices=(*KINDS, "all"), default="all")
        self._common(show)

        release = actions.add_parser(
            "release",
            help="Force-release one hold: waiters are woken and the holder is told it lost it.",
        )
        release.add_argument("name")
        release.add_argument(
            "--holder",
            metavar="ID",
            help="The holder id to evict (as listed). Needed for a semaphore with several "
            "holders; for a lock, the release is refused if another holder has it by then.",
        )
        release.add_argument(
            "--kind", choices=KINDS, default=None, help="Needed when both kinds have NAME."
        )
        release.add_argument("--yes", action="store_true", help="Do not ask for confirmation.")
        self._common(release)

    @staticmethod
    def _common(parser: ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print JSON instead of text.")
        parser.add_argument(
            "--using", metavar="ALIAS", default=None, help="Cache alias (default: CACHE_ALIAS)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        try:
            if action == "list":
                self.list(options)
            elif action == "show":
                self.show(options)
            else:
                self.release(options)
        except LockError as exc:  # bad names, unknown alias, Redis unreachable
            raise CommandError(str(exc)) from exc

    # -- list ---------------------------------------------------------------------------
    def list(self, options: dict[str, Any]) -> None:
        prefix, kind, using = options["prefix"], options["kind"], options["using"]
        locks: list[HolderInfo] = []
        semaphores: list[SemaphoreInfo] = []
        if kind in ("lock", "all"):
            locks = sorted(
                _all_pages(lambda cursor: list_locks(prefix, cursor=cursor, **_page(using))),
                key=lambda hold: hold.name,
            )
        if kind in ("semaphore", "all"):
            semaphores = sorted(
                _all_pages(lambda cursor: list_semaphores(prefix, cursor=cursor, **_page(using))),
                key=lambda semaphore: semaphore.name,
            )
        if options["json"]:
            data: dict[str, Any] = {}
            if kind in ("lock", "all"):
                data["locks"] = [_holder_json(hold) for hold in locks]
            if kind in ("semaphore", "all"):
                data["semaphores"] = [_semaphore_json(semaphore) for semaphore in semaphores]
            self._print_json(data)
            return
        if not locks and not semaphores:
            what = {"lock": "No locks are", "semaphore": "No semaphores are"}.get(
                kind, "No locks or semaphores are"
            )
            where = f" whose name starts with {prefix!r}" if prefix else ""
            self.stdout.write(f"{what} held{where}.")
            return
        rows = [_lock_row(hold) for hold in locks]
        rows += [row for semaphore in semaphores for row in _semaphore_rows(semaphore)]
        rows.sort(key=lambda row: (row[1], row[0]))  # by name, a lock before a semaphore
        self.stdout.write(_table(rows))

    # -- show ---------------------------------------------------------------------------
    def show(self, options: dict[str, Any]) -> None:
        name, kind, using = options["name"], options["kind"], options["using"]
        lock = get_lock(name, using=using) if kind in ("lock", "all") else None
        semaphore = get_semaphore(name, using=using) if kind in ("semaphore", "all") else None
        if lock is None and semaphore is None:
            what = {"lock": "No lock", "semaphore": "No semaphore"}.get(
                kind, "No lock or semaphore"
            )
            raise CommandError(f"{what} named {name!r} is held or waited for.")
        if options["json"]:
            data: dict[str, Any] = {}
            if kind in ("lock", "all"):
                data["lock"] = None if lock is None else _holder_json(lock)
            if kind in ("semaphore", "all"):
                data["semaphore"] = None if semaphore is None else _semaphore_json(semaphore)
            self._print_json(data)
            return
        blocks = []
        if lock is not None:
            blocks.append(f"lock {name!r}, fence {lock.fence}\n" + _holder_block(lock))
        if semaphore is not None:
            head = (
                f"semaphore {name!r}: limit {semaphore.limit}, {semaphore.count} held, "
                f"{semaphore.waiting} waiting"
            )
            holders = "\n\n".join(_holder_block(holder) for holder in semaphore.holders)
            blocks.append(f"{head}\n{holders}" if holders else head)
        self.stdout.write("\n\n".join(blocks))

    # -- release ------------------------------------------------------------------------
    def release(self, options: dict[str, Any]) -> None:
        name, using = options["name"], options["using"]
        holder_id = options["holder"]
        if holder_id is not None and (
            len(holder_id) != HOLDER_ID_LENGTH or set(holder_id) - set("0123456789abcdef")
        ):
            raise CommandError(
                f"--holder must be a holder id as listed: {HOLDER_ID_LENGTH} lowercase hex "
                f"digits (got {holder_id!r})"
            )
        kind, target = self._release_target(name, options["kind"], holder_id, using)
        if not options["yes"]:
            self._confirm(kind, target)
        by = operator()
        released = force_release(name, target.holder_id, kind=kind, by=by, using=using)
        if not released:
            raise CommandError(
                f"The {kind} {name!r} no longer has holder {target.holder_id} (it was released, "
                "expired or replaced meanwhile); nothing was changed."
            )
        if options["json"]:
            self._print_json(
                {
                    "released": True,
                    "kind": kind,
                    "name": name,
                    "holder_id": target.holder_id,
                    "by": by,
                    "holder": _holder_json(target),
                }
            )
        else:
            self.stdout.write(
                f"Released {kind} {name!r}: holder {target.holder_id} ({_who(target)})."
            )

    def _release_target(
        self, name: str, kind: Kind | None, holder_id: str | None, using: str | None
    ) -> tuple[Kind, HolderInfo]:
        lock = get_lock(name, using=using) if kind in (None, "lock") else None
        semaphore = get_semaphore(name, using=using) if kind in (None, "semaphore") else None
        sem_holders = semaphore.holders if semaphore is not None else ()
        if kind is None:
            if lock is None and not sem_holders:
                raise CommandError(f"Nothing named {name!r} is held (no lock, no semaphore).")
            if lock is not None and sem_holders:
                if holder_id is not None and holder_id == lock.holder_id:
                    kind = "lock"
                elif holder_id is not None and any(h.holder_id == holder_id for h in sem_holders):
                    kind = "semaphore"
                else:
                    raise CommandError(
                        f"Both a lock and a semaphore named {name!r} are held: pass --kind."
                    )
            else:
                kind = "lock" if lock is not None else "semaphore"
        if kind == "lock":
            if lock is None:
                raise CommandError(f"The lock {name!r} is not held.")
            if holder_id is not None and holder_id != lock.holder_id:
                raise CommandError(
                    f"The lock {name!r} is held by {lock.holder_id} ({_who(lock)}), not by "
                    f"{holder_id}; nothing was changed."
                )
            return "lock", lock
        if not sem_holders:
            raise CommandError(f"The semaphore {name!r} has no holders.")
        ids = ", ".join(f"{h.holder_id} ({_who(h)})" for h in sem_holders)
        if holder_id is None:
            if len(sem_holders) > 1:
                raise CommandError(
                    f"The semaphore {name!r} has {len(sem_holders)} holders: pass --holder with "
                    f"one of {ids}."
                )
            return "semaphore", sem_holders[0]
        for holder in sem_holders:
            if holder.holder_id == holder_id:
                return "semaphore", holder
        raise CommandError(f"The semaphore {name!r} has no holder {holder_id}; its holders: {ids}.")

    def _confirm(self, kind: Kind, target: HolderInfo) -> None:
        if not _interactive():
            raise CommandError(
                "Refusing to force-release without confirmation: stdin is not a terminal. "
                "Pass --yes to release anyway."
            )
        self.stdout.write(f"{kind} {target.name!r}, holder {target.holder_id}:")
        self.stdout.write(_holder_block(target))
        self.stdout.write(
            "Its holder loses it at once and is told so at its next check. Release it? [y/N] ",
            ending="",
        )
        self.stdout.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            raise CommandError("Not released.")

    def _print_json(self, data: Any) -> None:
        self.stdout.write(json.dumps(data, indent=2, default=str))


# -- helpers ------------------------------------------------------------------------------
def operator() -> str:
    """Who releases: ``cli:<os user>@<host>``, passed to force_release as ``by``."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no user name for this uid (containers)
        user = str(os.getuid())
    return f"cli:{user}@{socket.gethostname()}"


def _interactive() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError, OSError):  # closed or replaced stdin
        return False


def _page(using: str | None) -> dict[str, Any]:
    return {"count": PAGE_SIZE, "using": using}


def _all_pages(fetch: Callable[[str | None], Page[T]]) -> Iterator[T]:
    cursor: str | None = None
    while True:
        page = fetch(cursor)
        yield from page.items
        cursor = page.cursor
        if cursor is None:
            return


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _shown(text: str) -> str:
    """``text`` for a terminal: control and format characters (which holders' metadata may
    contain) escaped as ``\\x1b``, ``\\u202e``..., so that they cannot move the cursor, clear
    or retitle the screen, or reorder what is shown."""
    if text.isprintable():
        return text
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in text
    )


def _who(hold: HolderInfo) -> str:
    parts = [f"host {_shown(hold.host or '?')}", f"pid {hold.pid if hold.pid is not None else '?'}"]
    if hold.label:
        parts.append(_shown(hold.label))
    return ", ".join(parts)


def _cells(hold: HolderInfo, slots: str) -> list[str]:
    return [
        hold.kind,
        _shown(hold.name),
        hold.holder_id,
        _shown(hold.host or "-"),
        "-" if hold.pid is None else str(hold.pid),
        _shown(hold.task or hold.thread or "-"),
        _shown(hold.label or "-"),
        _when(hold.acquired_at),
        f"{hold.ttl:.1f}s",
        slots,
    ]


def _lock_row(hold: HolderInfo) -> list[str]:
    return _cells(hold, "-" if hold.fence is None else str(hold.fence))


def _semaphore_rows(semaphore: SemaphoreInfo) -> list[list[str]]:
    slots = f"{semaphore.count}/{semaphore.limit}"
    if semaphore.waiting:
        slots += f" +{semaphore.waiting} waiting"
    if not semaphore.holders:
        return [["semaphore", _shown(semaphore.name), *["-"] * 7, slots]]
    return [_cells(holder, slots) for holder in semaphore.holders]


def _table(rows: Sequence[Sequence[str]]) -> str:
    table = [list(COLUMNS), *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in table
    )


def _holder_block(hold: HolderInfo) -> str:
    shown = ("host", "pid", "thread", "task", "label")
    extra = {key: value for key, value in hold.metadata.items() if key not in shown}
    lines = [
        ("holder", hold.holder_id),
        ("host", _shown(hold.host or "-")),
        ("pid", "-" if hold.pid is None else str(hold.pid)),
        ("thread/task", _shown(hold.task or hold.thread or "-")),
        ("label", _shown(hold.label or "-")),
        ("acquired at", f"{_when(hold.acquired_at)} UTC"),
        ("expires in", f"{hold.ttl:.1f}s (at {_when(hold.expires_at)} UTC)"),
    ]
    if hold.ticket is not None:
        lines.append(("ticket", str(hold.ticket)))
    if extra:
        lines.append(("metadata", json.dumps(extra, default=str, sort_keys=True)))
    return "\n".join(f"  {key:<12} {value}" for key, value in lines)


def _holder_json(hold: HolderInfo) -> dict[str, Any]:
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


def _semaphore_json(semaphore: SemaphoreInfo) -> dict[str, Any]:
    return {
        "kind": "semaphore",
        "name": semaphore.name,
        "limit": semaphore.limit,
        "count": semaphore.count,
        "waiting": semaphore.waiting,
        "holders": [_holder_json(holder) for holder in semaphore.holders],
    }

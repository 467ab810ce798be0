"""``manage.py redis_locks``: list, show and force-release live locks and semaphores.

::

    manage.py redis_locks list [--prefix P] [--kind lock|semaphore|all] [--json]
    manage.py redis_locks show NAME [--kind lock|semaphore|all] [--json]
    manage.py redis_locks release NAME [--holder ID] [--kind lock|semaphore] [--yes] [--json]
    manage.py redis_locks hot [--window 5m|60m] [--count N] [--kind lock|semaphore|all] [--json]

Each takes ``--using ALIAS`` (default: the configured ``CACHE_ALIAS``). Built on
:mod:`django_redis_locks.inspection`; holds are named by their holder ids, never by tokens.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import sys
from argparse import ArgumentParser
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_redis_locks.core.errors import LockError
from django_redis_locks.core.protocol.holder import HOLDER_ID_LENGTH
from django_redis_locks.inspection import (
    HolderInfo,
    Page,
    SemaphoreInfo,
    force_release,
    get_lock,
    get_semaphore,
    hot_names,
    list_locks,
    list_semaphores,
)
from django_redis_locks.management.hot_output import hot_json, hot_table
from django_redis_locks.management.listing_output import (
    holder_block,
    holder_json,
    lock_row,
    semaphore_json,
    semaphore_rows,
    table,
    who,
)
from django_redis_locks.management.release_target import Kind, release_target

T = TypeVar("T")
KINDS: tuple[Kind, ...] = ("lock", "semaphore")
PAGE_SIZE = 500
WINDOWS = {"5m": 300, "60m": 3600}


class Command(BaseCommand):
    help = "List, show and force-release live Redis locks and semaphores."
    requires_system_checks: tuple[str, ...] = ()  # an operator's tool: works while checks fail

    def add_arguments(self, parser: ArgumentParser) -> None:
        assert isinstance(parser, CommandParser)
        actions = parser.add_subparsers(
            dest="action",
            required=True,
            metavar="{list,show,release,hot}",
            parser_class=CommandParser,
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

        hot = actions.add_parser(
            "hot", help="The most contended names: refused tries, waits and holds waited for."
        )
        hot.add_argument("--window", choices=tuple(WINDOWS), default="5m", help="(default: 5m)")
        hot.add_argument("--count", type=int, default=20, help="How many names (default: 20).")
        hot.add_argument("--kind", choices=(*KINDS, "all"), default="all")
        self._common(hot)

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
            elif action == "hot":
                self.hot(options)
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
                data["locks"] = [holder_json(hold) for hold in locks]
            if kind in ("semaphore", "all"):
                data["semaphores"] = [semaphore_json(semaphore) for semaphore in semaphores]
            self._print_json(data)
            return
        if not locks and not semaphores:
            what = {"lock": "No locks are", "semaphore": "No semaphores are"}.get(
                kind, "No locks or semaphores are"
            )
            where = f" whose name starts with {prefix!r}" if prefix else ""
            self.stdout.write(f"{what} held{where}.")
            return
        rows = [lock_row(hold) for hold in locks]
        rows += [row for semaphore in semaphores for row in semaphore_rows(semaphore)]
        rows.sort(key=lambda row: (row[1], row[0]))  # by name, a lock before a semaphore
        self.stdout.write(table(rows))

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
                data["lock"] = None if lock is None else holder_json(lock)
            if kind in ("semaphore", "all"):
                data["semaphore"] = None if semaphore is None else semaphore_json(semaphore)
            self._print_json(data)
            return
        blocks = []
        if lock is not None:
            blocks.append(f"lock {name!r}, fence {lock.fence}\n" + holder_block(lock))
        if semaphore is not None:
            head = (
                f"semaphore {name!r}: limit {semaphore.limit}, {semaphore.count} held, "
                f"{semaphore.waiting} waiting"
            )
            holders = "\n\n".join(holder_block(holder) for holder in semaphore.holders)
            blocks.append(f"{head}\n{holders}" if holders else head)
        self.stdout.write("\n\n".join(blocks))

    # -- hot ----------------------------------------------------------------------------
    def hot(self, options: dict[str, Any]) -> None:
        kind = None if options["kind"] == "all" else options["kind"]
        window = options["window"]
        found = hot_names(
            WINDOWS[window], count=options["count"], kind=kind, using=options["using"]
        )
        if options["json"]:
            self._print_json({"window": WINDOWS[window], "hot": [hot_json(h) for h in found]})
        elif found:
            self.stdout.write(f"The most contended over the last {window}:")
            self.stdout.write(hot_table(found))
        else:
            self.stdout.write(f"Nothing was contended over the last {window}.")

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
        kind, target = release_target(name, options["kind"], holder_id, using)
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
                    "holder": holder_json(target),
                }
            )
        else:
            self.stdout.write(
                f"Released {kind} {name!r}: holder {target.holder_id} ({who(target)})."
            )

    def _confirm(self, kind: Kind, target: HolderInfo) -> None:
        if not _interactive():
            raise CommandError(
                "Refusing to force-release without confirmation: stdin is not a terminal. "
                "Pass --yes to release anyway."
            )
        self.stdout.write(f"{kind} {target.name!r}, holder {target.holder_id}:")
        self.stdout.write(holder_block(target))
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

"""One renewer per process: a thread that keeps auto-renewed holds alive, in batches.

Each hold is renewed every third of its TTL. Holds due at about the same time on the same
server go out in one pipeline (one round trip), and stay aligned afterwards. When a renewal
finds the hold gone (expired, taken over, force-released) or cannot reach Redis before the
hold's conservative local expiry, the hold is marked lost: ``ensure_held()`` raises
``LockLost`` from then on and the ``on_lost`` callback runs. Nothing dies silently: a failed
round is retried within a fraction of the TTL.

The renewer never renews a hold whose owner (thread or task) has ended, or whose lock object
is gone, and never renews anything in a forked child: holds belong to the process that made
them, and the thread itself does not survive ``fork()``. The thread ends when idle.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .holds import Hold
from .scripting import Call

__all__ = ["Renewable", "Renewer", "renewer"]

logger = logging.getLogger(__name__)

_IDLE_EXIT_SECONDS = 10.0
_RETRY_SECONDS = 0.25


class Renewable(Protocol):
    """What the renewer needs from a held primitive."""

    hold: Hold

    def renew_call(self) -> Call: ...

    def renewed(self, reply: Any, sent_at: float) -> str | None:
        """Apply a renewal reply; return why the hold is lost, or None if it was renewed."""

    def alive(self) -> str | None:
        """Return why renewing should stop (owner ended, lock gone), or None to go on."""


@dataclass(eq=False)
class _Entry:
    item: Renewable
    next_due: float


class Renewer:
    """The process-wide renewal thread. Use the module's :func:`renewer`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._entries: dict[int, _Entry] = {}
        self._thread: threading.Thread | None = None
        self._idle_since = time.monotonic()
        self._wakes_at = 0.0  # when the thread wakes next on its own (0: it is not waiting)
        self.pid = os.getpid()
        self.rounds = 0

    def add(self, item: Renewable) -> None:
        """Start renewing ``item`` a third of its TTL from now."""
        with self._cond:
            due = time.monotonic() + item.hold.ttl / 3
            self._entries[id(item.hold)] = _Entry(item, due)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="drl-renewer", daemon=True)
                self._thread.start()
            elif due < self._wakes_at:  # else the thread wakes in time anyway: let it sleep
                self._cond.notify()

    def remove(self, hold: Hold) -> None:
        """Stop renewing ``hold`` (no-op if it is not renewed)."""
        with self._cond:
            self._entries.pop(id(hold), None)
            if not self._entries:
                self._idle_since = time.monotonic()

    def __contains__(self, hold: Hold) -> bool:
        return id(hold) in self._entries

    @property
    def running(self) -> bool:
        return self._thread is not None

    def _run(self) -> None:
        while True:
            with self._cond:
                due = self._wait_for_due()
                self._wakes_at = 0.0  # awake: an add() in the meantime is seen next round
                if due is None:
                    self._thread = None
                    return
            self._renew(due)

    def _wait_for_due(self) -> list[_Entry] | None:
        while True:
            now = time.monotonic()
            if not self._entries:
                if now - self._idle_since >= _IDLE_EXIT_SECONDS:
                    return None
                self._wakes_at = now + _IDLE_EXIT_SECONDS
                self._cond.wait(_IDLE_EXIT_SECONDS)
                continue
            if any(entry.next_due <= now for entry in self._entries.values()):
                # Take along every hold due within a sixth of its TTL: renewing it a little
                # early costs nothing, and holds renewed together stay due together.
                return [
                    entry
                    for entry in self._entries.values()
                    if entry.next_due <= now + entry.item.hold.ttl / 6
                ]
            next_due = min(entry.next_due for entry in self._entries.values())
            self._wakes_at = next_due
            self._cond.wait(next_due - now)

    def _renew(self, due: Sequence[_Entry]) -> None:
        self.rounds += 1
        groups: dict[int, list[_Entry]] = {}
        for entry in due:
            reason = entry.item.alive()
            if reason is not None:
                logger.warning("renew: stopped renewing: %s", reason)
                self.remove(entry.item.hold)
                continue
            groups.setdefault(id(entry.item.hold.backend), []).append(entry)
        for entries in groups.values():
            self._renew_group(entries)

    def _renew_group(self, entries: list[_Entry]) -> None:
        # One pipeline per server (per node serving the holds' slots on a Cluster).
        backend = entries[0].item.hold.backend
        sent_at = time.monotonic()
        replies: list[Any]
        try:
            replies = backend.run_many([entry.item.renew_call() for entry in entries])
        except Exception as exc:
            replies = [exc] * len(entries)
        for entry, reply in zip(entries, replies, strict=True):
            hold = entry.item.hold
            if isinstance(reply, Exception):
                if hold.local_time_left() <= 0:
                    self._lost(entry, f"could not be renewed before it expired ({reply})")
                else:
                    logger.warning("renew: failed, retrying: %s", reply)
                    entry.next_due = time.monotonic() + min(_RETRY_SECONDS, hold.ttl / 10)
                continue
            reason = entry.item.renewed(reply, sent_at)
            if reason is not None:
                self._lost(entry, reason)
            else:
                entry.next_due = sent_at + hold.ttl / 3

    def _lost(self, entry: _Entry, reason: str) -> None:
        self.remove(entry.item.hold)
        try:
            entry.item.hold.mark_lost(reason)
        except Exception:  # a user's on_lost callback must not kill the renewer
            logger.exception("renew: on_lost callback failed")


_renewer = Renewer()
_renewer_mutex = threading.Lock()


def renewer() -> Renewer:
    """The renewer of this process (a fresh one after ``fork()``)."""
    global _renewer
    with _renewer_mutex:
        if _renewer.pid != os.getpid():
            _renewer = Renewer()
        return _renewer


def _reinit_after_fork() -> None:
    global _renewer_mutex
    _renewer_mutex = threading.Lock()


os.register_at_fork(after_in_child=_reinit_after_fork)

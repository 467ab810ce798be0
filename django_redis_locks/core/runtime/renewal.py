"""Background upkeep of holds: renew auto-renewed holds, undo grants nobody heard of.

Work is split into *lanes*: one per server, and one per node of a Redis Cluster. Each lane has
a thread of its own, so a stalled or unreachable server delays only the holds it serves,
never those of a healthy one. A lane

- **renews** each of its holds every third of its TTL (or of what an extend that shortened
  it left); holds due at about the same time go
  out in one pipeline (one round trip) and stay aligned afterwards. A renewal that finds the
  hold gone, or cannot reach Redis before the hold's conservative local expiry, marks the
  hold lost (see :mod:`.holds` for why a renewal in flight during a release never does) and
  hands the report to the callback thread (:mod:`.callbacks`): no callback runs on a lane.
- **reclaims** tokens whose fate is unknown: an acquire or release that timed out or lost its
  connection may have run. The lane sends the token-checked release as soon as Redis answers
  again, and checks once more at growing intervals for as long as the hold could live (a
  request stuck in a dead connection may still arrive late), so an unknown outcome leaves
  nothing behind for longer than Redis is out of reach.
- **watches** tokens a late copy of an acquire could still revive (see :mod:`.deadlines`):
  after a hold whose acquire went out more than once ends, or an acquire in flight fails,
  the same token-checked release is sent at growing intervals until that request's deadline
  has passed on the server, whatever it finds meanwhile (a copy that lands is undone at the
  next look), and past it once more.

Lanes never renew a hold whose owner ended or whose primitive was garbage-collected, and
never work in a forked child: the renewer is made anew per runtime (process and threading
implementation, see :func:`.ownership.runtime_key`). A lane's thread ends when it is idle.
A lane keeps its Backend only through its work (a renewal's hold, a reclaim), so a Backend
nobody uses any more is collected and its lanes go with it. What each reply means for the
work is in :mod:`.renewal_work`.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

from django_redis_locks.core.events import subscribed
from django_redis_locks.core.protocol.scripting import Call

from .callbacks import callbacks
from .exiting import exiting, quiet_at_exit, stop_at_exit
from .holds import Hold
from .ownership import PerRuntime
from .renewal_work import (
    RETRY_SECONDS,
    Reclaim,
    Renewal,
    next_renewal,
    reclaim_replied,
    renewal_replied,
)

__all__ = ["Renewer", "renewer"]

logger = quiet_at_exit(logging.getLogger(__name__))

_IDLE_EXIT_SECONDS = 10.0


class _Lane:
    """The renewals and reclaims of one server (or Cluster node), on a thread of its own."""

    def __init__(self, backend: Any, node: str) -> None:
        self._backend = weakref.ref(backend)  # its work keeps it alive, not the lane
        self.name = f"{backend.name} node {node}" if node else backend.name
        self._thread_name = f"drl-renew {node}" if node else "drl-renew"
        self._cond = threading.Condition()
        self._renewals: dict[int, Renewal] = {}
        self._reclaims: list[Reclaim] = []
        self._thread: threading.Thread | None = None
        self._idle_since = time.monotonic()
        self._wakes_at = 0.0  # when the thread wakes on its own (0: it is not waiting)
        self._failing: set[str] = set()  # the phases whose work found Redis unreachable
        self.rounds = 0
        self._exit = False  # the interpreter exits: the thread ends
        stop_at_exit(self)

    # -- entries -------------------------------------------------------------------------
    def add(self, renewal: Renewal) -> None:
        renewal.due = next_renewal(renewal.hold, time.monotonic())
        with self._cond:
            self._renewals[id(renewal.hold)] = renewal
            thread = self._poke(renewal.due)
        if thread is not None:
            thread.start()

    def sooner(self, hold: Hold) -> None:
        with self._cond:
            renewal = self._renewals.get(id(hold))
            due = next_renewal(hold, time.monotonic())
            if renewal is None or due >= renewal.due:
                return
            renewal.due = due
            thread = self._poke(due)
        if thread is not None:
            thread.start()

    def remove(self, hold: Hold) -> bool:
        with self._cond:
            removed = self._renewals.pop(id(hold), None) is not None
            if removed and not self._renewals and not self._reclaims:
                self._idle_since = time.monotonic()
            return removed

    def holds(self, hold: Hold) -> bool:
        return id(hold) in self._renewals

    def reclaim(self, item: Reclaim) -> None:
        with self._cond:
            self._reclaims.append(item)
            thread = self._poke(item.due)
        if thread is not None:
            thread.start()

    @property
    def busy(self) -> bool:
        return bool(self._renewals or self._reclaims)

    def _poke(self, due: float) -> threading.Thread | None:
        """Called with the mutex held: wake the thread if ``due`` is earlier than it would
        wake anyway, or return a new thread for the caller to start once it let go of the
        mutex (under gevent, starting a thread may switch greenlets). None at exit."""
        if exiting():
            return None
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
            return self._thread
        if self._wakes_at == 0.0 or due < self._wakes_at:
            self._cond.notify()
        return None

    def stop_for_exit(self) -> threading.Thread | None:
        with self._cond:
            self._exit = True
            self._cond.notify_all()
            return self._thread

    # -- the thread ----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                work = self._wait_for_work()
                self._wakes_at = 0.0
                if work is None:
                    self._thread = None
                    return
            self.rounds += 1
            try:
                self._work(*work)
            except Exception:  # a lane outlives any reply: log it, look again shortly
                logger.exception("renew: %s: a round of work failed; retrying", self.name)
                later = time.monotonic() + RETRY_SECONDS
                for renewal in work[0]:
                    renewal.due = max(renewal.due, later)
                for item in work[1]:
                    item.due = max(item.due, later)
            del work  # while it waits, the thread keeps no Backend alive

    def _wait_for_work(self) -> tuple[list[Renewal], list[Reclaim]] | None:
        while True:
            if self._exit:
                return None
            now = time.monotonic()
            if not self._renewals and not self._reclaims:
                if now - self._idle_since >= _IDLE_EXIT_SECONDS:
                    return None
                self._wakes_at = now + _IDLE_EXIT_SECONDS
                self._cond.wait(_IDLE_EXIT_SECONDS)
                continue
            work = self._due(now)
            if work is not None:
                return work
            # (no reference to the work is kept while waiting: see _due)
            next_due = min(
                [r.due for r in self._renewals.values()] + [item.due for item in self._reclaims]
            )
            self._wakes_at = next_due
            self._cond.wait(next_due - now)

    def _due(self, now: float) -> tuple[list[Renewal], list[Reclaim]] | None:
        """What is due now, if anything (a function of its own, so that the waiting thread
        keeps no renewal, and so no Backend, alive)."""
        due_reclaims = [item for item in self._reclaims if item.due <= now]
        renewals = list(self._renewals.values())
        if due_reclaims or any(r.due <= now for r in renewals):
            # Take along every hold due within a sixth of its TTL: renewing it a little
            # early costs nothing, and holds renewed together stay due together.
            return [r for r in renewals if r.due <= now + r.hold.ttl / 6], due_reclaims
        return None

    def _work(self, renewals: Sequence[Renewal], reclaims: Sequence[Reclaim]) -> None:
        live: list[tuple[Renewal, int]] = []
        for renewal in renewals:
            reason = renewal.stop_reason()
            if reason is not None:
                logger.warning("renew: stopped renewing: %s", reason)
                self.remove(renewal.hold)
            else:
                live.append((renewal, renewal.hold.generation))
        calls = [renewal.call for renewal, _ in live] + [item.call for item in reclaims]
        backend = self._backend()
        if not calls or backend is None:  # (work keeps the Backend alive: never None here)
            return
        sent_at = time.monotonic()
        try:
            results: list[Any] = backend.run_many(calls)
        except Exception as exc:
            results = [exc] * len(calls)
        self._note_health(
            [renewal for renewal, _ in live], results[: len(live)], reclaims, results[len(live) :]
        )
        for (renewal, generation), result in zip(live, results, strict=False):
            renewal_replied(renewal, generation, result, sent_at, self._lost, failed=self._failed)
        done = [
            item
            for item, result in zip(reclaims, results[len(live) :], strict=True)
            if reclaim_replied(item, result, sent_at)
        ]
        if done:
            with self._cond:
                self._reclaims = [item for item in self._reclaims if item not in done]
                if not self._renewals and not self._reclaims:
                    self._idle_since = time.monotonic()

    def _note_health(
        self,
        renewals: Sequence[Renewal],
        renewed: Sequence[Any],
        reclaims: Sequence[Reclaim],
        reclaimed: Sequence[Any],
    ) -> None:
        """Log when the lane's Redis stops answering a phase's work (its results: an
        exception when no reply came), naming what of it failed: "renew" for renewals,
        "reclaim" for clean-ups (of an acquire whose reply never came, a release that could
        not be sent...). A failed acquire's clean-up is logged as such, also when a renewal
        went along in its round (and the renewal, failing too, under "renew"). Once a round
        gets every reply, say that it answers again, under each failing phase that was
        answered (or the phase of the work that was)."""
        failures = {
            "renew": [
                (f"the renewal of {renewal.label}", result)
                for renewal, result in zip(renewals, renewed, strict=False)
                if isinstance(result, Exception)
            ],
            "reclaim": [
                (f"the clean-up of {item.what}", result)
                for item, result in zip(reclaims, reclaimed, strict=False)
                if isinstance(result, Exception)
            ],
        }
        for phase, failed in failures.items():
            if failed and phase not in self._failing:
                self._failing.add(phase)
                more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
                logger.warning(
                    "%s: %s cannot be reached by %s%s; retrying: %s",
                    phase,
                    self.name,
                    failed[0][0],
                    more,
                    failed[0][1],
                )
        answered = not any(failures.values())
        if answered and self._failing:
            ran = [phase for phase, work in (("renew", renewals), ("reclaim", reclaims)) if work]
            for phase in [phase for phase in ran if phase in self._failing] or ran[:1]:
                logger.warning("%s: %s answers again", phase, self.name)
            self._failing.clear()

    @staticmethod
    def _failed(renewal: Renewal, reason: str) -> None:
        """A renewal got no reply (it is retried): an event, if anyone may listen, built and
        sent on the callback thread (no user code runs on the lane, not even a listener's
        ``wants``)."""
        report = renewal.hold.on_renew_failed
        if report is not None and subscribed():
            callbacks().submit(report, reason)

    def _lost(self, renewal: Renewal, reason: str, generation: int) -> None:
        self.remove(renewal.hold)
        if renewal.hold.lose(reason, generation):
            callbacks().submit(renewal.hold.report_lost)


class Renewer:
    """The lanes of one runtime. Use the module's :func:`renewer`."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._lanes: weakref.WeakKeyDictionary[Any, dict[str, _Lane]] = weakref.WeakKeyDictionary()

    def _lane(self, backend: Any, route_key: str) -> _Lane:
        name = backend.lane_name(route_key)
        with self._mutex:
            lanes = self._lanes.setdefault(backend, {})
            lane = lanes.get(name)
            if lane is None:
                lane = lanes[name] = _Lane(backend, name)
            return lane

    def add(self, renewal: Renewal) -> None:
        """Renew ``renewal.hold`` every third of its TTL from now on."""
        lane = self._lane(renewal.hold.backend, renewal.call.keys[0])
        renewal.hold.lane = lane
        lane.add(renewal)

    def sooner(self, hold: Hold) -> None:
        """The owner shortened ``hold``: bring its renewal forward to before its new end."""
        lane = hold.lane
        if lane is not None:
            lane.sooner(hold)

    def remove(self, hold: Hold) -> None:
        """Stop renewing ``hold`` (no-op if it is not renewed)."""
        lane = hold.lane
        if lane is not None:
            hold.lane = None
            lane.remove(hold)

    def reclaim(self, backend: Any, call: Call, lifetime: float, what: str) -> None:
        """Send ``call`` (a token-checked release) as soon as Redis answers, and again while
        what it undoes could still appear, for up to ``lifetime`` seconds."""
        logger.info("reclaim: %s: the outcome is unknown; undoing it in the background", what)
        self._lane(backend, call.keys[0]).reclaim(Reclaim.new(backend, call, lifetime, what))

    def watch(
        self, backend: Any, call: Call, until: float, lifetime: float, what: str, *, now: bool
    ) -> None:
        """Send ``call`` (a token-checked release) at growing intervals until ``until``, and
        at ``until``, whatever it finds (see :meth:`Reclaim.watching`)."""
        left = until - time.monotonic()
        if left > 0:
            logger.debug("reclaim: watching for %.3f s: %s", left, what)
        else:  # no copy can land any more, but one may have landed: released once
            logger.debug("reclaim: releasing once: %s", what)
        item = Reclaim.watching(backend, call, until, lifetime, what, now=now)
        self._lane(backend, call.keys[0]).reclaim(item)

    def __contains__(self, hold: Hold) -> bool:
        return any(lane.holds(hold) for lane in self._all_lanes(hold.backend))

    def _all_lanes(self, backend: Any) -> list[_Lane]:
        with self._mutex:
            return list(self._lanes.get(backend, {}).values())

    def lanes(self) -> list[_Lane]:
        with self._mutex:
            return [lane for lanes in self._lanes.values() for lane in lanes.values()]

    @property
    def rounds(self) -> int:
        """Rounds of work done by all lanes so far."""
        return sum(lane.rounds for lane in self.lanes())

    @property
    def running(self) -> bool:
        return any(lane._thread is not None for lane in self.lanes())

    def rounds_on(self, backend: Any) -> int:
        """Rounds of work done so far by the lanes of ``backend``."""
        return sum(lane.rounds for lane in self._all_lanes(backend))

    def renewing(self, backend: Any) -> int:
        """How many holds on ``backend`` are renewed."""
        return sum(len(lane._renewals) for lane in self._all_lanes(backend))

    def reclaiming(self, backend: Any) -> int:
        """How many reclaims are pending on ``backend``'s lanes."""
        return sum(len(lane._reclaims) for lane in self._all_lanes(backend))


_renewer = PerRuntime(Renewer)


def renewer() -> Renewer:
    """The renewer of this runtime (a fresh one after ``fork()`` or monkey-patching)."""
    return _renewer.get()

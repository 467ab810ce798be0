"""Hand-offs (``core/handoff.py``): a lock's holder hands its hold off and a worker of another
process takes it over with the ticket, as a queued task's hold goes from the process that
enqueues it to the worker that runs it (see the README, "Hand-offs").

A history that draws them (``SimConfig.handoff``; from a generator of their own: a history with
none is drawn as before) has a holder call the library's ``_hand_off`` now and then instead of
its next operation; the ticket's task reaches a worker (``w<n>``, made then, in another
process) after 0 ms to 6 s, or two workers, or none; now and then it is stale (another fence),
or an operator force-releases the hold first. The worker runs the library's ``_take_over``
operation, whose script meets the faults of any script. Checked here: ``ticket_taken_once``,
``taker_fence_above_giver``, ``ticket_checked``, ``ticket_spent``, ``take_over_counts_once``,
``handed_off_unrenewed``; per script, invariants_takeover.py.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django_redis_locks.core import Lock, handoff
from django_redis_locks.core.errors import LockBackendError, LockError
from django_redis_locks.core.protocol import tickets

from .actions import force_release
from .clients import CHANNEL_PREFIX, Client, ClientSpec, SimBackend, SimHub, SimOwner, SimProcess
from .invariants import redis_keeps
from .invariants_replies import ints
from .probe import ScriptRun
from .world import Snapshot

if TYPE_CHECKING:
    from .driver import Simulation

Found = list[tuple[str, str]]  # (invariant, detail)
#: Most hand-offs a history makes; most processes it adds for workers.
MOST_HANDOFFS, MOST_NEW_PROCESSES = 8, 2
#: How many workers a ticket's task reaches (0: never taken over; 2: delivered twice), weighed.
COPIES, COPY_WEIGHTS = (0, 1, 2), (1, 6, 3)


@dataclass(eq=False)
class Ticket:
    """One hand-off: its ticket and what the checks need of it."""

    number: int
    text: str
    token: str
    fence: int
    giver: Client
    kept_until: int | None  # Redis's expiry of the hold at the hand-off (None: not live)
    failovers: int  # failovers before the hand-off
    queued: bool  # its token had a place in the queue at the hand-off (a failover gave it back)
    takers: list[Client] = field(default_factory=list)  # whose take_over returned True
    tasks: int = 0  # workers its task reached
    allowed: int = 1  # takers it may have: one more each time a failover gives its hold back
    spent_at: int = -1  # failovers before Redis gave its hold away (-1: not given away)


def worker_spec(rng: random.Random, name: str) -> ClientSpec:
    """A worker's lock of ``name``: its own TTL, auto_renew or not, how it holds."""
    return ClientSpec(
        kind="lock",
        name=name,
        limit=1,
        ttl=rng.choice((0.3, 1.5, 5.0, 30.0)),
        mode="try",  # (a worker never acquires: it only takes over)
        wait=0.0,
        auto_renew=rng.random() < 0.5,
        slice=None,
        replicas=None,
        hold_ms=rng.choice(((1, 20), (10, 200), (100, 2000), (500, 8000))),
        extend=rng.choice((0.0, 0.2)),
    )


class HandOffs:
    """The hand-offs and take-overs of one history (inert unless ``config.handoff``)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.on = sim.config.handoff
        self.rng = random.Random(sim.config.seed * 7211 + 0x0FF)
        self.rate = self.rng.choice((0.15, 0.35, 0.6)) if self.on else 0.0
        self.tickets: dict[str, Ticket] = {}  # by the token handed off
        self.due: list[tuple[int, int, str, Ticket]] = []  # (at, seq, what, ticket)
        self.tasks: dict[Client, tuple[Ticket, bool]] = {}  # worker -> its ticket, stale?
        self.new_processes = 0
        self._seq = 0
        self.granted: set[str] = set()  # new tokens a take-over's script granted

    # -- what happens ------------------------------------------------------------------
    def actions(self) -> list[tuple[int, Any]]:
        return [(self.due[0][0], self._next)] if self.due else []

    def _next(self) -> None:
        _, _, what, ticket = heapq.heappop(self.due)
        if what == "evict":
            self._evict(ticket)
        else:
            self._deliver(ticket, stale=what == "stale")

    def _at(self, delay: int, what: str, ticket: Ticket) -> None:
        self._seq += 1
        heapq.heappush(self.due, (self.sim.clock.now_ms + delay, self._seq, what, ticket))

    def hand_off(self, client: Client) -> bool:
        """Maybe hand ``client``'s lock off (instead of its next operation); True if it did."""
        if not self.on or len(self.tickets) >= MOST_HANDOFFS or self.rng.random() >= self.rate:
            return False
        sim, lock, hold = self.sim, client.primitive, client.hold
        assert isinstance(lock, Lock) and hold is not None
        kept = redis_keeps(sim.snapshot, client, hold.token)
        queued = hold.token in sim.snapshot.holders(lock._keys_for(hold.backend).queue)
        try:
            text = handoff._hand_off(lock, client.owner)
        except LockError as exc:  # a late copy of its acquire may still land: not yet
            sim.faults["handoff_refused"] += 1
            sim.log(f"{client.label} hand_off refused: {type(exc).__name__}: {exc}")
            return False
        number = len(self.tickets) + 1
        failovers = sim.faults["failover"]
        ticket = Ticket(number, text, hold.token, hold.fence, client, kept, failovers, queued)
        self.tickets[hold.token] = ticket
        sim.faults["handoff"] += 1
        client.hold = None  # (it believes nothing any more)
        client.phase = "done" if client.role == "w" else "idle"
        client.wake_at = sim.clock.now_ms + self.rng.randint(1, 100)
        copies = self.rng.choices(COPIES, COPY_WEIGHTS)[0]
        for _ in range(copies):  # (the slowest often after the hold expired)
            delay = self.rng.randint(*self.rng.choice(((0, 30), (30, 300), (800, 6000))))
            self._at(delay, "stale" if self.rng.random() < 0.1 else "task", ticket)
        if self.rng.random() < 0.15:
            self._at(self.rng.randint(0, 1500), "evict", ticket)
        kept_text = "nothing of it" if kept is None else f"it until t+{kept - sim.clock.now_ms} ms"
        sim.log(
            f"{client.label} hand_off {client.spec.name} (fence {hold.fence}; Redis keeps "
            f"{kept_text}) -> ticket #{number}, its task to {copies} worker(s)"
        )
        return True

    def _process(self, avoid: SimProcess) -> SimProcess | None:
        """A process for a worker, other than ``avoid``: one that runs, or a new one."""
        sim = self.sim
        others = [p for p in sim.processes if p is not avoid and not p.crashed]
        if self.new_processes < MOST_NEW_PROCESSES and (not others or self.rng.random() < 0.3):
            pid = len(sim.processes)
            hub = SimHub(f"{CHANNEL_PREFIX}:p{pid}")
            process = SimProcess(pid, hub, SimBackend(sim.r, hub))
            sim.processes.append(process)
            sim.r.hset("sim:subs", hub.channel, 0 if sim.config.cluster else 1)
            self.new_processes += 1
            return process
        return self.rng.choice(others) if others else None

    def _deliver(self, ticket: Ticket, stale: bool) -> None:
        """The ticket's task reaches a worker, which takes the hold over."""
        sim, giver = self.sim, ticket.giver
        process = self._process(giver.process)
        if process is None:
            sim.log(f"ticket #{ticket.number}'s task finds no worker process")
            return
        spec = worker_spec(self.rng, giver.spec.name)
        cid = 100 + len(self.tasks)
        owner = SimOwner(f"w{cid}")
        worker = Client(cid, spec, process, process.primitive(spec), owner, role="w")
        sim.clients.append(worker)
        text = ticket.text
        if stale:  # its token with another grant's fence
            text = tickets.ticket(ticket.fence + self.rng.choice((-1, 1)), ticket.token)
        self.tasks[worker] = (ticket, stale)
        ticket.tasks += 1
        again = ticket.tasks > 1
        sim.faults["take_over"] += 1
        sim.faults["take_over_again" if again else "take_over_first"] += 1
        lock = worker.primitive
        assert isinstance(lock, Lock)
        worker.op = handoff._take_over(lock, process.backend, owner, text)
        worker.op_kind, worker.phase = "take_over", "op"
        sim.log(
            f"ticket #{ticket.number}'s task reaches {worker.label} (p{process.pid}: "
            f"{spec.describe()}){' again' if again else ''}: take_over"
            + (" with a stale ticket" if stale else "")
        )
        sim.resume(worker, None)

    def _evict(self, ticket: Ticket) -> None:
        """An operator force-releases the handed-off hold, if it is still the ticket's."""
        sim, giver = self.sim, ticket.giver
        keys: Any = giver.primitive._keys_for(giver.process.backend)
        held = sim.snapshot.lock(keys.lock)
        if held is None or held[0] != ticket.token or held[1] <= sim.clock.now_ms:
            sim.log(f"operator: ticket #{ticket.number}'s hold is not live, nothing to evict")
            return
        sim.faults["handoff_evicted"] += 1
        force_release(sim, giver, ticket.token, self.rng, f"operator (ticket #{ticket.number})")

    def taken(self, worker: Client, result: Any, error: BaseException | None) -> None:
        """A worker's take_over ended (True, False, or an error)."""
        sim = self.sim
        ticket, stale = self.tasks[worker]
        token, worker.token = worker.token, None
        if error is None and result is True:
            hold = worker.primitive._holds.get(worker.owner)
            assert hold is not None
            worker.hold = hold
            sim.faults["take_over_taken"] += 1
            if stale:
                sim.checker.violation(
                    "ticket_checked", f"{worker.label} took ticket #{ticket.number}'s hold over "
                    "with a stale ticket (another grant's fence)"
                )  # fmt: skip
            if hold.fence <= ticket.fence:
                sim.checker.violation(
                    "taker_fence_above_giver",
                    f"{worker.label} took ticket #{ticket.number} over with fence {hold.fence}, "
                    f"the giver's {ticket.fence}",
                )
            if len(ticket.takers) >= ticket.allowed:
                before = ", ".join(t.label for t in ticket.takers)
                sim.checker.violation(
                    "ticket_taken_once",
                    f"{worker.label} took ticket #{ticket.number} over after {before}",
                )
            ticket.takers.append(worker)
            worker.phase = "holding"
            worker.wake_at = sim.clock.now_ms + self.rng.randint(*worker.spec.hold_ms)
            return
        if token is not None:  # what its script may have made is undone, or never was
            sim.checker.ended.append((worker, token, "take-over"))
        if error is not None:
            unknown = isinstance(error, LockBackendError)
            sim.faults["take_over_unknown" if unknown else "take_over_interrupted"] += 1
        elif stale:
            sim.faults["take_over_stale"] += 1
        elif ticket.spent_at >= 0:
            sim.faults["take_over_spent"] += 1
        elif ticket.token in sim.checker.evicted:
            sim.faults["take_over_evicted"] += 1
        else:
            sim.faults["take_over_expired"] += 1
        worker.phase = "done"

    def late_copy(self, call: Any, reply: Any) -> None:
        """A late copy of a take-over ran (take_over_counts_once checks what it did)."""
        self.sim.faults["late_take_over"] += 1

    # -- the checks ----------------------------------------------------------------------
    def script_ran(self, run: ScriptRun) -> Found:
        """A take-over's script granted (flag 0): a take-over counts once; Redis gives a
        ticket's hold away once, with a fence above the giver's, and only for its ticket."""
        values = ints(run.reply) if run.name == "lock_take_over" else None
        if not values or values[0] != 1 or len(values) != 5 or values[4] != 0:
            return []
        found: Found = []
        new, old = run.arg(2), run.arg(0)
        if new in self.granted:
            found.append(("take_over_counts_once", f"a copy of a take-over granted {new[:8]} anew"))
        self.granted.add(new)
        ticket = self.tickets.get(old)
        if ticket is None:
            return found
        if run.arg(1) != str(ticket.fence):
            found.append(("ticket_checked", f"a stale ticket #{ticket.number} took its hold over"))
        if ticket.spent_at >= 0:
            found.append(("ticket_taken_once", f"ticket #{ticket.number}'s hold given away again"))
        ticket.spent_at = self.sim.faults["failover"]
        if values[1] <= ticket.fence:
            found.append(
                (
                    "taker_fence_above_giver",
                    f"ticket #{ticket.number} taken over with fence {values[1]}, the giver's "
                    f"{ticket.fence}",
                )
            )
        return found

    def invariants(self, snap: Snapshot) -> Found:
        """While the token of a ticket holds: the handed-off hold, never longer than at the
        hand-off (nothing renews or extends it), and never once Redis gave it away; never
        another grant. But after a failover: since the hand-off (it may give the hold back:
        then the ticket may be taken over once more), or, for a grant to a place in the queue
        the token kept at the hand-off, before it (a failover that lost the giver's hold gave
        its place back, which nobody releases now; Redis may hand it the name until its lease
        ends, as to any waiter that died)."""
        found: Found = []
        now, failovers = snap.now_ms, self.sim.faults["failover"]
        for ticket in self.tickets.values():
            giver = ticket.giver
            keys: Any = giver.primitive._keys_for(giver.process.backend)
            held = snap.lock(keys.lock)
            if held is None or held[0] != ticket.token or held[1] <= now:
                continue
            kept, since = ticket.kept_until, failovers > ticket.failovers
            if held[2] != ticket.fence:  # another grant of its token
                if not (since or ticket.queued):
                    found.append(
                        ("ticket_spent", f"ticket #{ticket.number}'s token holds another grant")
                    )
                continue
            if kept is not None and held[1] > kept and not since:
                found.append(
                    (
                        "handed_off_unrenewed",
                        f"ticket #{ticket.number}'s hold, handed off until t+{kept - now} ms, is "
                        f"kept until t+{held[1] - now} ms",
                    )
                )
            if ticket.spent_at < 0:
                continue
            if not since:
                found.append(
                    (
                        "ticket_spent",
                        f"ticket #{ticket.number}'s token holds again after its take-over",
                    )
                )
                continue
            ticket.spent_at, ticket.allowed = -1, len(ticket.takers) + 1
            self.sim.faults["failover_ticket_back"] += 1
            self.sim.log(f"  ticket #{ticket.number}'s hold is back at its token (failover)")
        return found

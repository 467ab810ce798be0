"""Failover (``DRL_SIM_FAILOVER=1``): a replica that lags the primary, and a promotion of it.

The replica is a copy of every key of the namespace and of ``sim:exp`` (the virtual expiries),
taken at random moments (every 0 to twice the history's lag) and whenever a simulated ``WAIT``
reports a replica (so that replica has every write up to it). A failover (once or twice a
history, at a random step) stops the world 1-100 ms, replaces the keys by the replica's copy
(writes since lost), loses the messages and late copies of requests in flight (they went to
the old primary), wakes every process's waiters (its listener reconnects; a stale subscription
is fresh) and half the time empties the script cache. The new primary's replica starts anew.

What the docs say a failover may break is excused, only where it broke it: a believed hold
the replica does not keep as long as believed (its grant or last extension did not reach it)
is left out of ``beliefs_exclusive`` and ``belief_within_redis`` until a reply about it from a
script run since reaches its holder; a release or clean-up the replica did not have leaves
its token live or queued (``ends_as_redis_saw``) until the replica's expiry for it; a waiter
whose place the replica did not have (or had older) queues anew (``fifo``); a lock back at an
earlier holder keeps its fence, and the next grant must top every fence before
(``fences_increase``). Checked besides: a believed hold whose grant and every extension reached
the replica is kept there as long as believed (``replicated_hold_kept``), and, at each grant,
a hold taken with ``wait_for_replicas`` had a ``WAIT`` report it (``replicas_acknowledged``).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from django_redis_locks.core.protocol.constants import HANDOVER_WINDOW_MS, WAITER_LEASE_MS
from django_redis_locks.core.runtime.holds import Hold

from .config import DEFAULT_STEPS
from .invariants import redis_keeps
from .probe import PROBE
from .world import Snapshot

if TYPE_CHECKING:
    from .clients import Client
    from .driver import Simulation

Found = list[tuple[str, str]]  # (invariant, detail)
NAMESPACE_KEYS = "sim:{*"
#: The replica's copy: every key of the namespace and sim:exp, as DUMP gives them.
COPY = r"""
local keys = redis.call('KEYS', ARGV[1])
keys[#keys + 1] = 'sim:exp'
local out = {}
for _, key in ipairs(keys) do
    local data = redis.call('DUMP', key)
    if data then
        out[#out + 1] = key
        out[#out + 1] = data
    end
end
return out
"""
#: The promotion: the namespace and sim:exp become the copy (ARGV[2..]: key, dump, ...).
PROMOTE = r"""
for _, key in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', key) end
redis.call('DEL', 'sim:exp')
for i = 2, #ARGV, 2 do redis.call('RESTORE', ARGV[i], 0, ARGV[i + 1]) end
return (#ARGV - 1) / 2
"""
_GRANTS = ("lock_acquire", "sem_acquire", "lock_extend", "sem_refresh", "lock_take_over")
_TOLD = ("lock_extend", "sem_refresh", "lock_release", "sem_release", "lock_state")


def _success(reply: Any) -> bool:
    return isinstance(reply, list) and bool(reply) and reply[0] == 1


class Failover:
    """The replica and the failovers of one history (inert unless ``config.failover``)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.on = sim.config.failover
        # A generator of its own: the rest of the seed's history is drawn as without failover.
        self.rng = rng = random.Random(sim.config.seed * 6007 + 0xFA11)
        count = rng.choice((1, 1, 2)) if self.on else 0
        self.steps = set(rng.sample(range(5, DEFAULT_STEPS - 10), count))
        self.lag_ms = rng.choice((5, 50, 300, 1500))
        self.next_copy = 0
        self.writes = 0  # script runs so far
        self.copy: list[Any] = []  # the replica: key, dump, key, dump...
        self.copied = 0  # the number of script runs the copy has
        self.marks: dict[str, int] = {}  # token -> the script run of its latest grant/extension
        self.waited: set[str] = set()  # tokens whose grant a WAIT reported replicated
        self.excused: dict[str, Hold] = {}  # token -> a hold the failover lost or cut short
        self.ended_until: dict[str, int] = {}  # token -> until when its lost end is excused
        self.ceilings: dict[str, tuple[str, int]] = {}  # lock key -> (restored holder, top fence)
        self.overlapped: set[str] = set()  # excused tokens seen believed alongside a new holder

    # -- notes from the driver ---------------------------------------------------------
    def ran(self, call: Any, reply: Any) -> None:
        """A script ran: count it; note a token's grant or extension."""
        if not self.on:
            return
        self.writes += 1
        name = call.script.name
        if name in _GRANTS and _success(reply):  # (a take-over's grant: its new token's)
            self.marks[str(call.args[2 if name == "lock_take_over" else 0])] = self.writes

    def waited_for(self, client: Client, call: Any, reply: Any, acked: int) -> None:
        """A WAIT after an acquire reported ``acked`` replicas: they have every write so far."""
        if self.on and acked >= 1:
            self.replicate("WAIT reported a replica")
            if _success(reply):
                self.waited.add(str(call.args[0]))

    def granted(self, client: Client) -> None:
        """An acquire returned a hold: with wait_for_replicas, a WAIT reported its grant."""
        hold = client.hold
        if self.on and client.spec.replicas and hold is not None and hold.token not in self.waited:
            self.sim.checker.violation(
                "replicas_acknowledged",
                f"{client.label} holds with wait_for_replicas, and no WAIT reported its grant",
            )

    def told(self, call: Any) -> None:
        """A reply about a token's hold, from a script run now, reached its holder."""
        if self.on and call.script.name in _TOLD:
            self.excused.pop(str(call.args[0]), None)

    def replicate_if_due(self) -> None:
        now = self.sim.clock.now_ms
        if self.on and now >= self.next_copy:
            self.replicate("")
            self.next_copy = now + self.rng.randint(0, 2 * self.lag_ms)

    def replicate(self, why: str) -> None:
        self.copy = list(self.sim.r.eval(COPY, 0, NAMESPACE_KEYS))
        self.copied = self.writes
        if why:
            self.sim.log(f"  replica has every write so far ({why})")

    # -- what the checks excuse ----------------------------------------------------------
    def excuses(self, hold: Hold) -> bool:
        """Whether ``hold`` is one the failover lost or cut short and its holder was not told."""
        return self.excused.get(hold.token) is hold

    def end_lost(self, token: str, now_ms: int) -> bool:
        """Whether ``token``'s end (a release, a clean-up; or the dequeue of a hold the failover
        lost) was lost by the failover and the replica's expiry for it has not passed."""
        return self.ended_until.get(token, 0) > now_ms

    def invariants(self, snap: Snapshot) -> Found:
        """After a failover, the first new holder of a lock has a fence above every fence
        granted before it (fences_increase). (And a count of the excused holders that still
        believe while another client holds the name: what the excuse is for.)"""
        found: Found = []
        now = snap.now_ms
        for client in self.sim.clients if self.excused else ():
            hold = client.hold
            if hold is None or not self.excuses(hold) or not client.believes(now):
                continue
            others = sum(
                1
                for other in self.sim.clients
                if other.spec.name == client.spec.name
                and other.hold is not None
                and other.believes(now)
                and not self.excuses(other.hold)
            )
            if others >= client.spec.limit and hold.token not in self.overlapped:
                self.overlapped.add(hold.token)
                self.sim.faults["failover_overlap"] += 1
                self.sim.log(f"  {client.label} believes a hold the failover lost, as do others")
        for key, (restored, top) in list(self.ceilings.items()):
            held = snap.lock(key)
            if held is None or held[0] == restored:
                continue
            if held[2] <= top:
                found.append(("fences_increase", f"{key}: fence {held[2]} after {top} (failover)"))
            del self.ceilings[key]
        return found

    # -- the failover --------------------------------------------------------------------
    def due(self, step: int) -> bool:
        return step in self.steps

    def fail_over(self) -> None:
        sim, rng, faults = self.sim, self.rng, self.sim.faults
        sim.advance_to(sim.clock.now_ms + rng.randint(1, 100))  # the promotion takes a while
        before = sim.snapshot
        copied, restored = self.copied, sim.r.eval(PROMOTE, 0, NAMESPACE_KEYS, *self.copy)
        flushed = rng.random() < 0.5
        if flushed:
            sim.r.script_flush()
            sim.probe_sha = sim.r.script_load(PROBE)
        lost = len(sim.deliveries) + len(sim.late)
        sim.deliveries.clear()
        sim.late.clear()
        for process in sim.processes:
            if not process.crashed:
                process.stale_until = 0
                for group in process.hub.waiters.values():
                    for waiter in group:
                        waiter.wake("")
        sim.dirty = True
        sim.tick()
        faults["failover"] += 1
        sim.log(
            f"FAILOVER: the replica (with {copied} of {self.writes} script runs, {restored} keys) "
            f"is promoted; {lost} messages and late copies lost; every waiter woken"
            + ("; script cache empty" if flushed else "")
        )
        self._beliefs(copied, before)
        # Writes the replica did not have are gone: a token's grant or extension since then
        # was never on this primary (until it is granted or extended again).
        self.marks = {token: at for token, at in self.marks.items() if at <= copied}
        self._places(before)
        self._ends(before)
        self._fences()
        self.replicate("")  # the new primary's replica starts from its state

    def _beliefs(self, copied: int, before: Snapshot) -> None:
        sim, now, snap = self.sim, self.sim.clock.now_ms, self.sim.snapshot
        for client in sim.clients:
            hold = client.hold
            if hold is None:
                continue
            if not client.believes(now) or hold.token in sim.checker.evicted:
                # A hold its holder has not seen end yet no longer believes (its estimate ran
                # out, a release is on its way) or that an operator evicted: a place in the
                # queue the failover gave back to its token (its admission came after the
                # copy) stays, once its holder learns the hold is gone, until its lease runs
                # out, as for a believed hold (below).
                self._place_restored(before, client, hold.token)
                continue
            if self.excuses(hold):
                continue  # lost by an earlier failover, and not told yet: still excused
            keys: Any = client.primitive._keys_for(client.process.backend)
            kept = redis_keeps(snap, client, hold.token)
            believed = hold.expires_at * 1000
            if kept is not None and believed <= kept + 0.5:
                sim.faults["failover_hold_kept"] += 1
                if hold.token in self.waited:
                    sim.faults["failover_waited_hold_kept"] += 1
                continue
            if self.marks.get(hold.token, self.writes + 1) <= copied:
                said = "nothing" if kept is None else f"until t+{kept - now}"
                sim.checker.violation(
                    "replicated_hold_kept",
                    f"{client.label}'s hold (fence {hold.fence}) reached the replica, which "
                    f"keeps {said} ms of it; believed until t+{believed - now:.0f} ms",
                )
            self.excused[hold.token] = hold
            # (a queue place whose confirmation was lost outlives the hold's end: excused)
            left = _live_until(snap, client, keys, hold.token)
            self.ended_until[hold.token] = max(left, self.ended_until.get(hold.token, 0))
            how = "lost" if kept is None else "cut short"
            sim.faults["failover_hold_lost" if kept is None else "failover_hold_cut"] += 1
            sim.log(f"  {client.label}'s hold (fence {hold.fence}) {how} by the failover")

    def _place_restored(self, before: Snapshot, client: Client, token: str) -> None:
        """Excuse ``token``'s place in the queue if the failover gave it back (live now, not
        before), until its lease and a hand-over window have passed."""
        keys: Any = client.primitive._keys_for(client.process.backend)
        until = _place_until(self.sim.snapshot, keys, token)
        if until and not _place_until(before, keys, token):
            self.ended_until[token] = max(until, self.ended_until.get(token, 0))
            self.sim.log(f"  {client.label}'s token {token[:8]} is queued again (place restored)")

    def _places(self, before: Snapshot) -> None:
        sim, snap = self.sim, self.sim.snapshot
        for client in sim.clients:
            if client.op_kind != "acquire" or client.token is None or client.ticket is None:
                continue
            keys: Any = client.primitive._keys_for(client.process.backend)
            ticket = snap.holders(keys.queue).get(client.token)
            if ticket != client.ticket:
                client.ticket, client.bypassed = ticket, 0
                sim.faults["failover_place_lost"] += 1
                sim.log(f"  {client.label}'s place in the queue lost by the failover")
                continue
            # The replica has the place but not the waiter's later asks (their lease renewals
            # came after the copy): on the new primary the place lives until the replica's
            # lease, and is gone (it queues anew) unless the waiter asks again before that.
            lease = int(snap.holders(keys.leases).get(client.token, 0))
            if lease < int(before.holders(keys.leases).get(client.token, 0)):
                asked = lease - WAITER_LEASE_MS  # the last ask the new primary knows of
                if asked < client.last_ask:
                    client.last_ask = asked
                    sim.faults["failover_lease_lost"] += 1
                    sim.log(
                        f"  {client.label}'s place in the queue kept by the failover until "
                        f"t+{lease % 10_000_000} only (its later asks were lost)"
                    )

    def _ends(self, before: Snapshot) -> None:
        """Tokens whose end (a release, a clean-up) took effect before the failover and is
        undone by it: live, or queued, until when the replica keeps them."""
        sim, snap = self.sim, self.sim.snapshot
        for client, token, _ in sim.checker.ended:
            keys: Any = client.primitive._keys_for(client.process.backend)
            until = _live_until(snap, client, keys, token)
            if until <= snap.now_ms or _live_until(before, client, keys, token) > snap.now_ms:
                continue  # not live again, or live already (and checked as it was)
            if until > self.ended_until.get(token, 0):
                self.ended_until[token] = until
                sim.faults["failover_end_lost"] += 1
                sim.log(f"  {client.label}'s token {token[:8]} is live again (its end was lost)")

    def _fences(self) -> None:
        checker, snap = self.sim.checker, self.sim.snapshot
        for key, (_, fence) in list(checker.fences.items()):
            held = snap.lock(key)
            top = max(fence, self.ceilings.get(key, ("", 0))[1])
            if held is None:
                del checker.fences[key]
            else:
                checker.fences[key] = (held[0], held[2])
                if held[2] < fence:
                    self.sim.faults["failover_fence_back"] += 1  # an earlier holder's, again
            if held is None or held[2] < top:
                self.ceilings[key] = (held[0] if held else "", top)


def _place_until(snap: Snapshot, keys: Any, token: str) -> int:
    """Until when ``snap`` keeps ``token``'s place in the queue live (its lease, and a
    hand-over window), 0: none."""
    lease = int(snap.holders(keys.leases).get(token, 0))
    if token in snap.holders(keys.queue) and lease > snap.now_ms:
        return lease + HANDOVER_WINDOW_MS
    return 0


def _live_until(snap: Snapshot, client: Client, keys: Any, token: str) -> int:
    """Until when ``snap`` keeps ``token`` live: its hold, or its place in the queue (while
    its lease runs, it may be handed the name, for the hand-over window)."""
    if client.spec.kind == "lock":
        held = snap.lock(keys.lock)
        until = held[1] if held is not None and held[0] == token else 0
    else:
        until = int(snap.holders(keys.holders).get(token, 0))
    lease = int(snap.holders(keys.leases).get(token, 0))
    if token in snap.holders(keys.queue) and lease > snap.now_ms:
        until = max(until, lease + HANDOVER_WINDOW_MS)
    return until

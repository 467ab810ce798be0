"""The promises checked after every step, from the server's state and the clients' beliefs.

Each check is a function named after the promise; it returns the violations it found.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from django_redis_locks.core.protocol.constants import (
    HANDOVER_WINDOW_MS,
    RECENT_RELEASES,
    WAITER_LEASE_MS,
)
from django_redis_locks.core.protocol.holder import holder_id
from django_redis_locks.core.protocol.replies import FORCED, loss_reason
from django_redis_locks.core.runtime.holds import State
from django_redis_locks.core.runtime.renewal_work import RETRY_SECONDS as RENEWAL_RETRY_SECONDS

from .clients import Client
from .invariants_script import script_invariants
from .invariants_state import nothing_left, state_invariants
from .probe import ScriptRun
from .world import Snapshot

if TYPE_CHECKING:
    from .driver import Simulation

Found = list[tuple[str, str]]  # (invariant, detail)
_ACQUIRE_SCRIPTS = ("lock_acquire", "sem_acquire")
_NO_HOLD = ("acquire", "take-over")  # how an operation that got no hold ended (``ended``)
#: A waiter that keeps asking in time sees at most this many grants to others per client of
#: its name (waiters ahead of it, and slices of the holder's session) before its own.
BYPASS_PER_CLIENT = 4
#: Longest a free name may wait for a live waiter: its re-check (1 s), the hand-over window,
#: and the longest the simulator holds a request in flight (1.5 s), with 1 s to spare.
GIVEN_WITHIN_MS = 1000 + HANDOVER_WINDOW_MS + 1500 + 1000
#: Longest a token nobody holds any more may be live in Redis again (a late copy of its
#: acquire that landed within the request's window) while the renewer watches it: the watch
#: looks at least every window (a request's validity, 1 s here), and a look may be lost.
REVIVAL_MS = 2 * 1000 + 500


def _keys(client: Client) -> Any:
    return client.primitive._keys_for(client.process.backend)


def redis_keeps(snap: Snapshot, client: Client, token: str) -> int | None:
    """Until when (server ms) Redis keeps ``token``'s hold of ``client``'s name, by ``snap``;
    None if it keeps none."""
    keys = _keys(client)
    if client.spec.kind == "lock":
        held = snap.lock(keys.lock)
        return held[1] if held is not None and held[0] == token else None
    score = snap.holders(keys.holders).get(token)
    return None if score is None else int(score)


def _believes(sim: Simulation, client: Client, now_ms: int) -> bool:
    """Whether the client believes it holds, now, a hold no operator evicted (an evicted
    holder learns it at its next call or renewal: forced_told, forced_reported), and no
    failover lost or cut short without its holder being told yet (failover.py)."""
    hold = client.hold
    if not client.believes(now_ms) or hold is None or hold.token in sim.checker.evicted:
        return False
    return not sim.failover.excuses(hold)


def holders_within_limit(snap: Snapshot, limits: dict[str, int]) -> Found:
    """Redis never counts more than ``limit`` live holders of a semaphore (scores > now)."""
    found: Found = []
    for key, state in snap.keys.items():
        if snap.part(key) == "sem":
            live = [t for t, score in state.scores.items() if score > snap.now_ms]
            limit = limits.get(key.split(":sem:", 1)[1], 1)
            if len(live) > limit:
                found.append(("holders_within_limit", f"{key}: {len(live)} live holders > {limit}"))
    return found


def beliefs_exclusive(sim: Simulation) -> Found:
    """At most one client believes it holds a lock (``limit`` for a semaphore) at any virtual
    instant, counting only beliefs that have not run out by the client's own clock (and not
    those of holders an operator evicted, who learn it at their next call)."""
    believers: dict[tuple[str, str], list[Client]] = defaultdict(list)
    for client in sim.clients:
        if _believes(sim, client, sim.clock.now_ms):
            believers[(client.spec.kind, client.spec.name)].append(client)
    found: Found = []
    for (kind, name), group in believers.items():
        if len(group) > group[0].spec.limit:
            who = ", ".join(f"{c.label} (fence {c.hold.fence})" for c in group if c.hold)
            found.append(("beliefs_exclusive", f"{kind} {name!r} believed held by {who}"))
    return found


def belief_within_redis(sim: Simulation) -> Found:
    """No client's own estimate of when its hold ends (Hold.expires_at) is later than the
    expiry Redis keeps for that hold: what a client believes never outlives what Redis keeps."""
    found: Found = []
    now, snap = sim.clock.now_ms, sim.snapshot
    for client in sim.clients:
        hold = client.hold
        if hold is None or not _believes(sim, client, now):
            continue
        kept = redis_keeps(snap, client, hold.token)
        believed = hold.expires_at * 1000
        if kept is None or believed > kept + 0.5:
            said = "nothing" if kept is None else f"until t+{kept - now} ms"
            found.append(
                (
                    "belief_within_redis",
                    f"{client.label} believes it holds {client.spec.kind} {client.spec.name!r} "
                    "until "
                    f"t+{believed - now:.0f} ms (fence {hold.fence}); Redis keeps {said}",
                )
            )
    return found


def renewed_before_end(sim: Simulation) -> Found:
    """An auto-renewed hold's next renewal is due before the end its holder believes (a third
    of its TTL, or of what an extend that shortened it left), so that a renewer that reaches
    Redis never lets it run out; one retrying after a lost reply is due within its retry step."""
    found: Found = []
    now = sim.clock.monotonic()
    for renewal in sim.renewer.renewals.values():
        hold = renewal.hold
        if hold.state is not State.HELD:
            continue
        step = min(RENEWAL_RETRY_SECONDS, hold.ttl / 10)
        if renewal.due > hold.expires_at and hold.expires_at > now + step:
            found.append(
                (
                    "renewed_before_end",
                    f"{renewal.label} (fence {hold.fence}): renewal due at "
                    f"t+{(renewal.due - now) * 1000:.0f} ms, after the hold's believed end "
                    f"at t+{(hold.expires_at - now) * 1000:.0f} ms",
                )
            )
    return found


class Checker:
    """Runs the invariants after each step; keeps what the stateful ones need."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.fences: dict[str, tuple[str, int]] = {}
        self.holders_seen: dict[str, set[str]] = defaultdict(set)
        self.free_since: dict[str, int] = {}
        self.ended: list[tuple[Client, str, str]] = []  # (client, token, how it ended)
        self.revived: dict[str, int] = {}  # an ended token live again: since when
        self.told_forced: set[str] = set()  # tokens a reply that reached them told: forced
        self.evicted: set[str] = set()  # tokens an operator's forced release evicted
        # Releases each name (its first key) has recorded, and the count when a token was
        # evicted: past RECENT_RELEASES more, the name no longer remembers the eviction.
        self.releases: Counter[str] = Counter()
        self.evicted_at: dict[str, tuple[str, int]] = {}

    @property
    def limits(self) -> dict[str, int]:
        return {spec.name: spec.limit for _, spec in self.sim.config.clients}

    def violation(self, name: str, detail: str) -> None:
        text = f"{name}: {detail}"
        if text not in self.sim.history.violations:
            self.sim.history.violations.append(text)
            self.sim.log(f"VIOLATION {text}")

    def check(self) -> bool:
        """All per-step invariants; True if any is violated (the history stops there)."""
        snap = self.sim.snapshot
        for hid, (key, _) in self.evicted_at.items():  # the record of the eviction is gone
            if key.replace(":sem:", ":semi:", 1) not in snap.keys:  # with its keys' expiry
                self.evicted_at[hid] = (key, -RECENT_RELEASES)
        found = holders_within_limit(snap, self.limits) + beliefs_exclusive(self.sim)
        found += belief_within_redis(self.sim) + renewed_before_end(self.sim)
        found += state_invariants(snap)
        found += self.fences_increase(snap) + self.fifo(snap)
        found += self.free_name_given(snap) + self.ends_as_redis_saw(snap)
        found += self.sim.failover.invariants(snap) + self.sim.handoffs.invariants(snap)
        for name, detail in found:
            self.violation(name, detail)
        return self.sim.history.failed

    def check_end(self) -> None:
        for name, detail in nothing_left(self.sim.snapshot):
            self.violation(name, detail)

    # -- stateful invariants --------------------------------------------------------------
    def fences_increase(self, snap: Snapshot) -> Found:
        """Fences grow strictly in grant order: each new holder of a lock (as Redis records
        it) has a larger fence than every earlier one, and a fence never goes back."""
        found: Found = []
        for key in snap.keys:
            held = snap.lock(key) if snap.part(key) == "lock" else None
            if held is None:
                continue
            token, _, fence = held
            last = self.fences.get(key)
            if last is not None and (fence < last[1] or (token != last[0] and fence == last[1])):
                found.append(("fences_increase", f"{key}: fence {fence} after {last[1]}"))
            self.fences[key] = (token, fence)
        return found

    def fifo(self, snap: Snapshot) -> Found:
        """A blocked waiter that keeps asking in time keeps its place in the queue (its
        ticket never changes) until it is served, and is passed over a bounded number of times
        (unless an operator force-released the name handed to it)."""
        found: Found = []
        now = snap.now_ms
        new_holders: dict[tuple[str, str], set[str]] = {}
        holding: dict[tuple[str, str], set[str]] = {}
        for client in self.sim.clients:
            spec = client.spec
            keys = _keys(client)
            if (spec.kind, spec.name) not in new_holders:
                if spec.kind == "lock":
                    held = snap.lock(keys.lock)
                    current = {held[0]} if held is not None else set()
                else:
                    current = set(snap.holders(keys.holders))
                seen = self.holders_seen[keys.queue]
                new_holders[(spec.kind, spec.name)] = current - seen
                holding[(spec.kind, spec.name)] = current
                seen |= current
            if client.token is None or client.op_kind != "acquire" or spec.mode == "try":
                continue
            if client.token in self.evicted:  # an operator took its hand-over: it queues anew
                continue
            ticket = snap.holders(keys.queue).get(client.token)
            in_time = now - client.last_ask < WAITER_LEASE_MS
            if ticket is None and client.token in holding[(spec.kind, spec.name)]:
                # Served: a copy of its own request confirmed the hand-over or admission (it
                # holds and left the queue; a late copy whose reply nobody reads). If that
                # hold runs out before the client asks again, it queues anew, at the back.
                client.ticket = None
            if ticket is not None and client.ticket is None:
                client.ticket = ticket
            elif ticket is not None and ticket != client.ticket and in_time:
                found.append(
                    (
                        "fifo_place_kept",
                        f"{client.label} asked in time yet went from ticket {client.ticket:.0f} "
                        f"to {ticket:.0f} in the {spec.kind} {spec.name!r} queue",
                    )
                )
            # (A waiter handed the name, or admitted to a slot, awaiting its confirmation, is
            # not passed over by those who take other slots meanwhile.)
            if client.ticket is not None and client.token not in holding[(spec.kind, spec.name)]:
                others = new_holders[(spec.kind, spec.name)] - {client.token}
                client.bypassed += len(others)
                peers = sum(1 for c in self.sim.clients if c.spec.name == spec.name)
                if client.bypassed > BYPASS_PER_CLIENT * peers + 4:
                    found.append(
                        (
                            "bypass_bounded",
                            f"{client.label} passed over {client.bypassed} times in the "
                            f"{spec.kind} {spec.name!r} queue",
                        )
                    )
        return found

    def free_name_given(self, snap: Snapshot) -> Found:
        """A name that stays free while a live waiter keeps asking for it (in time, from a
        process that runs) is given out within GIVEN_WITHIN_MS."""
        found: Found = []
        now, seen = snap.now_ms, set()
        for client in self.sim.clients:
            spec, keys = client.spec, _keys(client)
            if spec.name in seen:
                continue
            seen.add(spec.name)
            waiting = [
                c
                for c in self.sim.clients
                if c.spec.name == spec.name
                and c.op_kind == "acquire"
                and c.spec.mode != "try"
                and c.ticket is not None
                and not c.process.crashed
                and now - c.last_ask < WAITER_LEASE_MS
            ]
            if spec.kind == "lock":
                state = snap.keys.get(keys.lock)
                held = snap.lock(keys.lock)
                reserved = int(state.fields[4] or 0) if state and state.kind == "hash" else 0
                free = (held is None or held[1] <= now) and reserved <= now
            else:
                live = [s for s in snap.holders(keys.holders).values() if s > now]
                free = len(live) < spec.limit
            if not (free and waiting):
                self.free_since.pop(spec.name, None)
                continue
            since = self.free_since.setdefault(spec.name, now)
            if now - since > GIVEN_WITHIN_MS:
                who = ", ".join(c.label for c in waiting)
                found.append(
                    (
                        "free_name_given",
                        f"{spec.kind} {spec.name!r} free for {now - since} ms while {who} waited",
                    )
                )
        return found

    def ends_as_redis_saw(self, snap: Snapshot) -> Found:
        """A hold the client saw end (released, or lost), or the token of an acquire that
        ended without one, is no live hold in Redis nor a live place in its queue: a release
        that returned took effect, a loss reported was real, nothing is left held that the
        caller does not know about. The one exception is brief: what the renewer undoes (an
        unknown outcome, or a late copy of an acquire that went out more than once, landing
        within its deadline) may be live while it is on it, REVIVAL_MS at most. (A crashed
        process's undo went with it: what is left then stays for its TTL, as a crashed
        holder's hold.)"""
        found: Found = []
        now = snap.now_ms
        watched = {str(item.call.args[0]) for item in self.sim.renewer.reclaims}
        for client, token, how in self.ended:
            keys = _keys(client)
            if client.spec.kind == "lock":
                held = snap.lock(keys.lock)
                live = held is not None and held[0] == token and held[1] > now
                lease = snap.holders(keys.leases).get(token, 0)
            else:
                live = snap.holders(keys.holders).get(token, 0) > now
                lease = snap.holders(keys.leases).get(token, 0)
            queued = token in snap.holders(keys.queue) and lease > now
            lost = self.sim.failover.end_lost(token, now)  # a failover lost the end, for now
            if not (live or queued) or client.process.crashed or lost:
                self.revived.pop(token, None)
                continue
            since = self.revived.setdefault(token, now)
            if token in watched and now - since <= REVIVAL_MS:
                continue
            name = f"{client.spec.kind} {client.spec.name!r}"
            ended = f"{how} of {name} ended without a hold" if how in _NO_HOLD else (
                f"hold of {name} ended ({how})"
            )  # fmt: skip
            where = "keeps it" if live else "keeps its place in the queue"
            since_text = f"for {now - since} ms" if token in watched else "unwatched"
            found.append(
                (
                    "ends_as_redis_saw",
                    f"{client.label}'s {ended} but Redis still {where} ({since_text})",
                )
            )
        return found

    # -- notes from the driver ----------------------------------------------------------
    def asking(self, client: Client, call: Any) -> None:
        """The client's acquire script is about to run: note its token and when it asked (a
        take-over's: its new token)."""
        if call.script.name == "lock_take_over":
            client.token = str(call.args[2])
        if call.script.name not in _ACQUIRE_SCRIPTS:
            return
        now, token = self.sim.clock.now_ms, str(call.args[0])
        if token != client.token or now - client.last_ask >= WAITER_LEASE_MS:
            client.ticket, client.bypassed = None, 0
        client.asked_before = client.last_ask if token == client.token else 0
        client.token, client.last_ask = token, now

    def script_ran(self, run: ScriptRun) -> None:
        """A probed script ran: check its reply and what it changed."""
        for name, detail in script_invariants(run) + self.sim.handoffs.script_ran(run):
            self.violation(name, detail)
        if run.name in _ACQUIRE_SCRIPTS and isinstance(run.reply, list) and run.reply[:1] == [-3]:
            # Too late: it wrote nothing, its place's lease included, so it was no ask in time.
            for client in self.sim.clients:
                if client.token == run.arg(0) and client.last_ask == run.now_ms:
                    client.last_ask = client.asked_before
        if run.call.script.name in ("lock_release", "sem_release") and (
            run.reply == 1  # (or a later grant's release: it adds an entry too)
            or (run.reply == 0 and run.arg(0) in run.before.live_holders(run.now_ms))
        ):
            self.releases[run.call.keys[0]] += 1
            if run.arg(1) == "holder":
                self.evicted_at.setdefault(
                    run.arg(0), (run.call.keys[0], self.releases[run.call.keys[0]])
                )

    def replied(self, client: Client, call: Any, reply: Any) -> None:
        """A script's reply reached the client: a holder told about its hold after a
        failover believes what it was told; note a token told it was force-released."""
        self.sim.failover.told(call)
        self.told(call, reply)

    def told(self, call: Any, reply: Any) -> None:
        """A reply reached the holder (its own call's, or its renewal's, applied): note a
        token told that its hold was force-released. (A reply that was lost told nobody.)"""
        if reply == -2 or (isinstance(reply, list) and reply[:1] == [-2]):
            self.told_forced.add(str(call.args[0]))

    def op_ended(self, client: Client, kind: str, held: bool = False) -> None:
        """An operation ended; an acquire that did not get a hold (``held``) leaves its token
        to ends_as_redis_saw."""
        if kind == "acquire":
            if not held and client.token is not None:
                self.ended.append((client, client.token, "acquire"))
            client.token, client.ticket, client.bypassed = None, None, 0

    def hold_ended(self, client: Client, how: str) -> None:
        """The client saw its hold end (checked at the next step)."""
        if client.hold is not None:
            self.ended.append((client, client.hold.token, how))
            self.forced_reported(client.hold)

    def forced_reported(self, hold: Any) -> None:
        """A hold whose release, extend, refresh or renewal was told it was force-released is
        lost for that reason (LockLost: "it was force-released"), as long as the name still
        keeps the forced release among its recent releases (RECENT_RELEASES, and while its
        keys live: a semaphore's expire with its last holder): past that, a holder that
        missed the answer learns only that its hold is gone."""
        told = hold.token in self.told_forced and hold.state is State.LOST
        key, at = self.evicted_at.get(holder_id(hold.token), ("", 0))
        remembered = self.releases[key] - at < RECENT_RELEASES
        if told and remembered and hold.lost_reason != loss_reason(FORCED):
            self.violation("forced_reported", f"a force-released hold: {hold.lost_reason!r}")

    def granted(self, client: Client) -> None:
        """The client's acquire returned a hold (nothing to note yet)."""

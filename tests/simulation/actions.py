"""What the simulator may do next (a client's step, a wake-up, a renewal, a reclaim, a late
request), and how a client's program goes on when an operation ends."""

from __future__ import annotations

import dataclasses
import functools
import heapq
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django_redis_locks.core import Lock, Semaphore
from django_redis_locks.core.protocol import lock_calls as lock_protocol
from django_redis_locks.core.protocol import semaphore_calls as semaphore_protocol
from django_redis_locks.core.runtime.driver import Wait
from django_redis_locks.core.runtime.holds import State

from .clients import Client
from .invariants_script import holder_id

if TYPE_CHECKING:
    from .driver import Simulation

Action = tuple[int, Callable[[], None]]


def _ms(seconds: float) -> int:
    return math.ceil(round(seconds * 1000, 6))


def next_action(sim: Simulation) -> Action | None:
    """Every action that could come next, with its time; one of the earliest, at random."""
    now = sim.clock.now_ms
    found: list[Action] = []
    for client in sim.clients:
        if client.phase in ("idle", "holding"):
            found.append((client.wake_at, functools.partial(start, sim, client)))
        elif client.phase == "op" and client.pending is not None:
            at = client.ready_at
            if isinstance(client.pending, Wait):
                waiter: Any = client.pending.waiter
                woken = waiter.woken and client.wait_fault is None
                at = max(at, now) if woken else client.wait_deadline
            found.append((at, functools.partial(sim.execute, client)))
    if sim.config.operator and any(c.phase != "done" for c in sim.clients):
        found.append((sim.operator_at, functools.partial(operate, sim)))
    if sim.deliveries:
        found.append((sim.deliveries[0][0], lambda: deliver(sim)))
    if sim.late:
        found.append((sim.late[0][0], lambda: late(sim)))
    found += sim.handoffs.actions()
    for renewal in list(sim.renewer.renewals.values()):
        found.append((_ms(renewal.due), functools.partial(renew, sim, renewal)))
    for item in list(sim.renewer.reclaims):
        found.append((_ms(item.due), functools.partial(reclaim, sim, item)))
    if not found:
        return None
    earliest = max(now, min(at for at, _ in found))
    ready = [action for action in found if action[0] <= earliest]
    at, act = sim.rng.choice(ready)
    return max(at, now), act


def start(sim: Simulation, client: Client) -> None:
    """The client goes on with its program: acquire, extend, release, or give up its hold."""
    spec, primitive, rng = client.spec, client.primitive, sim.rng
    lock = primitive if isinstance(primitive, Lock) else None
    semaphore = primitive if isinstance(primitive, Semaphore) else None
    hold = client.hold
    if hold is not None and hold.state is State.HELD and client.phase == "holding":
        if lock is not None and sim.handoffs.hand_off(client):
            return
        roll = rng.random()
        if roll < spec.extend and lock is not None:
            seconds = rng.choice((0.1, 1.0, 3.0))
            replace = sim.config.replace_extend and sim.op_rng.random() < 0.5
            client.op, client.op_kind = lock._extend(hold, seconds, replace), "extend"
            sim.log(f"{client.label} extend {'to ' if replace else '+'}{seconds}s")
        elif roll < spec.extend and semaphore is not None:
            client.op, client.op_kind = semaphore._refresh(hold), "extend"
            sim.log(f"{client.label} refresh")
        elif roll < spec.extend + 0.03:
            client.phase, client.owner.alive = "done", False
            sim.log(f"{client.label} ends without releasing")
            return
        else:
            client.op, client.op_kind = primitive._release(hold), "release"
            sim.log(f"{client.label} release (fence {hold.fence})")
    else:
        blocking = spec.mode != "try"
        timeout = spec.wait if spec.mode == "block_timeout" else None
        backend = client.process.backend
        client.op = primitive._acquire(backend, client.owner, blocking, timeout)
        client.op_kind = "acquire"
        sim.log(f"{client.label} acquire {spec.kind} {spec.name} ({spec.mode})")
    client.phase = "op"
    sim.resume(client, None)


def pending(sim: Simulation, client: Client, effect: Any) -> None:
    """The operation yielded ``effect``: when it reaches the server (or ends, for a Wait)."""
    now, rng = sim.clock.now_ms, sim.rng
    client.pending = effect
    client.ready_at = now + rng.randint(0, 2)
    if isinstance(effect, Wait):
        client.wait_deadline = now + _ms(effect.timeout)
        fault = sim.config.plan.pick(rng, ("crash", "cancel", "interrupt"))
        if fault is not None:
            client.wait_fault = fault
            client.wait_deadline = now + rng.randint(0, _ms(effect.timeout))
    elif sim.config.plan.pick(rng, ("delay",)) is not None:
        sim.faults["delay"] += 1
        client.ready_at = now + rng.choice((rng.randint(5, 100), rng.randint(100, 1500)))


def finished(sim: Simulation, client: Client, result: Any, error: BaseException | None) -> None:
    """An operation ended with ``result`` or ``error``: the client's next phase."""
    now, rng, kind = sim.clock.now_ms, sim.rng, client.op_kind
    client.op, client.pending, client.op_kind = None, None, ""
    outcome = f"error {type(error).__name__}: {error}" if error is not None else repr(result)
    sim.log(f"{client.label} {kind} ends: {outcome}")
    acquired = kind == "acquire" and error is None and result.acquired
    sim.checker.op_ended(client, kind, acquired)
    if kind == "take_over":
        sim.handoffs.taken(client, result, error)
        return
    if acquired:
        client.hold = client.primitive._holds.get(client.owner)
        sim.checker.granted(client)
        sim.failover.granted(client)
        client.phase = "holding"
        client.wake_at = now + rng.randint(*client.spec.hold_ms)
        return
    if kind == "extend" and client.hold is not None and client.hold.state is State.HELD:
        client.phase = "holding"
        client.wake_at = now + rng.randint(*client.spec.hold_ms)
        return
    if kind == "release" and client.hold is not None:
        state = client.hold.state
        if state in (State.RELEASED, State.LOST):
            sim.checker.hold_ended(client, f"{state.value}: {outcome}")
    if kind == "extend" and client.hold is not None and client.hold.state is State.LOST:
        sim.checker.hold_ended(client, f"lost: {outcome}")
    if kind == "release" and error is not None and client.hold is not None:
        client.primitive._forget(client.hold)  # as leaving a ``with`` block does
    if client.hold is not None and client.hold.state is not State.HELD:
        client.hold = None
    client.phase = "holding" if client.hold is not None else "idle"
    if client.role == "w" and client.hold is None:
        client.phase = "done"  # a worker whose task's hold ended: its task is over
    client.wake_at = now + rng.randint(1, 100)


def deliver(sim: Simulation) -> None:
    _, _, pid, message = heapq.heappop(sim.deliveries)
    process = sim.processes[pid]
    if process.crashed:
        return
    woken = process.hub.deliver(message)
    sim.log(f"deliver to p{pid}: {message} ({len(woken)} waiter(s))")


def late(sim: Simulation) -> None:
    _, _, call = heapq.heappop(sim.late)
    reply = sim.run_script(call)
    sim.log(f"late copy of {call.script.name} -> {reply!r}")
    if call.script.name in ("lock_acquire", "sem_acquire"):  # past its deadline, or within
        refused = isinstance(reply, list) and reply[:1] == [-3]
        evicted = isinstance(reply, list) and reply[:1] == [-4]
        sim.faults["late_acquire_refused" if refused else "late_acquire_ran"] += 1
        if evicted:  # the token's hold was force-released: the copy took nothing
            sim.faults["late_acquire_evicted"] += 1
        if not refused and str(call.args[0]) in {token for _, token, _ in sim.checker.ended}:
            # after its caller was done with the token: what it made is the watch's to undo
            values = reply if isinstance(reply, list) else []
            if values[:1] == [1]:
                sim.faults["late_acquire_revived"] += 1
            elif values[:1] == [0] and int(values[2]) > 0:
                sim.faults["late_acquire_queued"] += 1
    if call.script.name == "lock_take_over":
        sim.handoffs.late_copy(call, reply)


def _send(sim: Simulation, call: Any) -> Any:
    """A background request, with the faults a request can meet: no reply, resent."""
    fault = sim.config.plan.pick(sim.rng, ("drop_request", "drop_reply", "resend"))
    if fault is not None:
        sim.faults[fault] += 1
    if fault == "drop_request":
        return ConnectionError("simulated: request lost")
    reply = sim.run_script(call)
    if fault == "resend":
        reply = sim.run_script(call)
    return ConnectionError("simulated: reply lost") if fault == "drop_reply" else reply


def renew(sim: Simulation, renewal: Any) -> None:
    hold = renewal.hold
    process = next((c.process for c in sim.clients if c.hold is hold), None)
    reason = renewal.stop_reason()
    if reason is not None or (process is not None and process.crashed):
        sim.renewer.remove(hold)
        sim.log(f"renewer stops renewing {renewal.label}: {reason or 'process crashed'}")
        return
    generation, sent_at = hold.generation, sim.clock.monotonic()
    reply = _send(sim, renewal.call)
    said = sim.renewer.renewed(renewal, generation, reply, sent_at)
    if not isinstance(reply, Exception) and hold.generation == generation:
        sim.failover.told(renewal.call)  # (its reply applied: the holder was told)
        sim.checker.told(renewal.call, reply)
    sim.log(f"renew {renewal.label} (fence {hold.fence}) -> {reply!r}: {said}")
    sim.checker.forced_reported(hold)


def reclaim(sim: Simulation, item: Any) -> None:
    process = next((p for p in sim.processes if p.backend is item.backend), None)
    if process is not None and process.crashed:
        sim.renewer.reclaims.remove(item)
        return
    reply = _send(sim, item.call)
    if sim.renewer.settled(item, reply):
        sim.renewer.reclaims.remove(item)
    until = f" (watching until t+{_ms(item.until) % 10_000_000})" if item.watch else ""
    sim.log(f"reclaim {item.what} -> {reply!r}{until}")


def operate(sim: Simulation) -> None:
    """An operator force-releases a live holder (a hand-over's too) by its holder id, as the
    admin and CLI do; half the time the request is sent twice, and the second run must say
    it happened already (3)."""
    rng, now, snap = sim.op_rng, sim.clock.now_ms, sim.snapshot
    sim.operator_at = now + rng.randint(300, 4000)
    live: list[tuple[Client, str]] = []
    for client in {c.spec.name: c for c in sim.clients}.values():
        keys: Any = client.primitive._keys_for(client.process.backend)
        if client.spec.kind == "lock":
            held = snap.lock(keys.lock)
            live += [(client, held[0])] if held is not None and held[1] > now else []
        else:
            live += [(client, t) for t, s in sorted(snap.holders(keys.holders).items()) if s > now]
    if not live:
        sim.log("operator: no live holder to force-release")
        return
    client, token = rng.choice(live)
    force_release(sim, client, token, rng, "operator")


def force_release(sim: Simulation, client: Client, token: str, rng: Any, who: str) -> None:
    """Force-release ``token``'s live hold of ``client``'s name by its holder id, as the admin
    and CLI do; half the time the request is sent twice (the second run must answer 3)."""
    keys, hid = client.primitive._keys_for(client.process.backend), holder_id(token)
    protocol: Any = lock_protocol if client.spec.kind == "lock" else semaphore_protocol
    call = protocol.release_call(keys, hid, forced=True)
    call = dataclasses.replace(call, args=(hid, "holder", f"{rng.getrandbits(32):08x}"))
    reply = sim.run_script(call)
    again = sim.run_script(call) if rng.random() < 0.5 else None
    sim.log(f"{who} force-releases {client.spec.kind} {client.spec.name} {hid} -> {reply!r}"
            + ("" if again is None else f", resent -> {again!r}"))  # fmt: skip
    sim.checker.evicted.add(token)
    if reply != 1:
        sim.checker.violation("forced_evicts", f"a live holder's forced release replied {reply!r}")
    if again is not None and again != 3:
        sim.checker.violation("forced_evicts", f"a resent forced release replied {again!r}")

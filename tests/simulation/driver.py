"""The simulated driver: many clients' operations interleaved one effect at a time, in an order
and with faults chosen by a seeded random generator, against one real redis-server."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from django_redis_locks.core.errors import LockBackendError, LockError
from django_redis_locks.core.protocol.constants import HOT_LONG_MS
from django_redis_locks.core.runtime.driver import (
    Command,
    Detach,
    Eval,
    EvalWait,
    Listen,
    Noted,
    Sent,
    Wait,
)

from .clients import CHANNEL_PREFIX, Client, SimBackend, SimHub, SimOwner, SimProcess
from .clock import VirtualClock, virtual_time
from .config import SimConfig
from .failover import Failover
from .faults import FaultLog
from .handoffs import HandOffs
from .invariants import Checker
from .lua_prelude import TICK, simulated_scripts
from .probe import PROBE, ScriptRun, probe_args
from .renewer import SimRenewer, simulated_renewer
from .world import Snapshot, decode

SCRIPT_FAULTS = ("crash", "cancel", "interrupt", "drop_request", "drop_reply", "resend",
                 "late_resend", "cancel_after")  # fmt: skip
WAIT_FAULTS = ("crash", "cancel", "interrupt")
#: After the last step: longer than any hold, lease, RETENTION_MS and the contention
#: figures' life (twice HOT_LONG_MS after their last write).
END_MS = 2 * HOT_LONG_MS + 60_000


@dataclass
class History:
    """What one run came to."""

    config: SimConfig
    steps: int = 0
    log: list[str] = field(default_factory=list)
    faults: FaultLog = field(default_factory=FaultLog)
    violations: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.violations)

    def report(self) -> str:
        lines = [*self.config.describe(), f"faults injected: {self.faults.line()}", "steps:"]
        lines += self.log
        lines += [f"VIOLATION: {v}" for v in self.violations]
        lines.append(f"replay: {self.config.replay()}")
        return "\n".join(lines)


class Simulation:
    """Runs one history (see the module docstring)."""

    def __init__(self, client: redis.Redis, config: SimConfig) -> None:
        self.r = client
        self.config = config
        self.rng = random.Random(config.seed * 1_000_003 + 17)
        self._tokens = random.Random(config.seed ^ 0x5EED)
        self.clock = VirtualClock()
        self.renewer = SimRenewer(self.clock)
        self.history = History(config)
        self.faults = self.history.faults
        self.deliveries: list[tuple[int, int, int, str]] = []  # (at, seq, pid, message)
        self.late: list[tuple[int, int, Any]] = []  # (at, seq, call)
        self._seq = 0
        self.dirty = True
        self.snapshot = Snapshot(self.clock.now_ms, {})
        self.processes: list[SimProcess] = []
        self.clients: list[Client] = []
        self.checker = Checker(self)
        self.step = 0
        self.probe_sha = client.script_load(PROBE)
        self.op_rng = random.Random(config.seed ^ 0x0FE4A7)  # the operator's, and extends'
        self.operator_at = self.clock.now_ms + self.op_rng.randint(200, 3000)
        self.failover = Failover(self)  # inert unless config.failover
        self.handoffs = HandOffs(self)  # inert unless config.handoff

    # -- set-up ------------------------------------------------------------------------
    def _build(self) -> None:
        for pid in range(self.config.processes):
            hub = SimHub(f"{CHANNEL_PREFIX}:p{pid}")
            self.processes.append(SimProcess(pid, hub, SimBackend(self.r, hub)))
        ids = self.config.ids or tuple(range(len(self.config.clients)))
        for cid, (pid, spec) in zip(ids, self.config.clients, strict=True):
            process = self.processes[pid]
            owner = SimOwner(f"c{cid}")
            client = Client(cid, spec, process, process.primitive(spec), owner)
            client.wake_at = self.clock.now_ms + self.rng.randint(0, 20)
            self.clients.append(client)
        subs: dict[Any, Any] = {
            p.hub.channel: 0 if self.config.cluster else 1 for p in self.processes
        }
        self.r.hset("sim:subs", mapping=subs)

    def _token(self) -> str:
        return f"{self._tokens.getrandbits(160):040x}"

    @contextlib.contextmanager
    def _patched(self) -> Iterator[None]:
        with (
            virtual_time(self.clock),
            simulated_scripts(),
            simulated_renewer(self.renewer, self._token),
        ):
            yield

    # -- the run -----------------------------------------------------------------------
    def run(self) -> History:
        self.r.flushall()
        with self._patched():
            self._build()
            from . import actions

            for step in range(self.config.steps):
                self.step = step
                if self.failover.due(step):
                    self.failover.fail_over()
                    self.history.steps += 1
                    if self.checker.check():
                        return self.history
                    continue
                chosen = actions.next_action(self)
                if chosen is None:
                    break
                at, act = chosen
                self.advance_to(at)
                if self.checker.check():
                    return self.history
                self.failover.replicate_if_due()
                act()
                self.history.steps += 1
            self.advance_to(self.clock.now_ms)
            if not self.checker.check():
                self.finish()
        return self.history

    def finish(self) -> None:
        """Every client stops; once every hold, lease and the retention passed, check what
        is left."""
        for process in self.processes:
            self.crash(process, quiet=True)
        self.renewer.renewals.clear()
        self.renewer.reclaims.clear()
        self.clock.advance(END_MS)
        self.dirty = True
        self.tick()
        self.checker.check_end()

    def log(self, text: str) -> None:
        self.history.log.append(f"{self.step:4d} t+{self.clock.now_ms % 10_000_000:>7} {text}")

    # -- time and the server -----------------------------------------------------------
    def advance_to(self, at: int) -> None:
        if at > self.clock.now_ms:
            self.clock.advance(at - self.clock.now_ms)
            self.dirty = True
        if self.dirty:
            self.tick()

    def tick(self) -> None:
        reply = self.r.eval(TICK, 0, self.clock.now_ms, "sim:{*")
        self.snapshot = decode(self.clock.now_ms, reply)
        self.dirty = False

    def run_script(self, call: Any) -> Any:
        """EVALSHA the (test build of the) script; capture its PUBLISHes; probe its lock or
        semaphore just before and after it, in the same pipeline. Returns the reply, or a redis
        error as an exception object."""
        probe = probe_args(self.probe_sha, call)
        pipe = self.r.pipeline(transaction=False)
        for args in (probe, call.evalsha_args(), probe):
            if args:
                pipe.evalsha(*args)
        pipe.lrange("sim:pub", 0, -1)
        pipe.delete("sim:pub")
        replies = pipe.execute(raise_on_error=False)
        reply, published = replies[1 if probe else 0], replies[-2]
        if isinstance(reply, redis.exceptions.NoScriptError):
            self.r.script_load(call.script.source)
            return self.run_script(call)
        self.dirty = True
        self.failover.ran(call, reply)
        if probe and not isinstance(reply, Exception):
            self.checker.script_ran(ScriptRun.read(self.clock.now_ms, call, replies))
        for item in published if isinstance(published, list) else ():
            channel, message = item.decode().split(" ", 1)
            self.publish(channel, message)
        if isinstance(reply, redis.exceptions.ResponseError):
            self.checker.violation("script_error", f"{call.script.name} failed: {reply}")
        return reply

    def publish(self, channel: str, message: str) -> None:
        pid = int(channel.rsplit(":p", 1)[1])
        process = self.processes[pid]
        if process.crashed or process.stale_until > self.clock.now_ms:
            self.log(f"  wake-up for p{pid} goes nowhere: {message}")
            return
        kind = self.config.plan.pick(self.rng, ("wake_lost", "wake_dup", "wake_delay", "stale_sub"))
        if kind is not None:
            self.faults[kind] += 1
        if kind in ("wake_lost", "stale_sub"):
            if kind == "stale_sub":
                process.stale_until = self.clock.now_ms + self.rng.randint(100, 3000)
            self.log(f"  [{kind}] wake-up for p{pid}: {message}")
            return
        for _ in range(2 if kind == "wake_dup" else 1):
            delay = self.rng.randint(10, 1500) if kind == "wake_delay" else self.rng.randint(0, 2)
            self._seq += 1
            heapq.heappush(self.deliveries, (self.clock.now_ms + delay, self._seq, pid, message))

    def crash(self, process: SimProcess, quiet: bool = False) -> None:
        process.crashed = True
        process.hub.waiters.clear()
        for client in self.clients:
            if client.process is process:
                client.phase, client.pending, client.op = "done", None, None
                client.op_kind, client.token, client.ticket = "", None, None
                client.owner.alive = False
        self.r.hset("sim:subs", process.hub.channel, 0)
        if not quiet:
            self.log(f"  p{process.pid} crashed")

    # -- effects -----------------------------------------------------------------------
    def execute(self, client: Client) -> None:
        """Run the client's pending effect (or a fault instead) and step its operation."""
        effect, client.pending = client.pending, None
        plan, name = self.config.plan, f"{client.label} {type(effect).__name__}"
        if isinstance(effect, Wait):
            fault = client.wait_fault
            client.wait_fault = None
            if fault is not None:
                return self.inject(client, fault, name)
            waiter: Any = effect.waiter
            news = waiter.take()
            self.log(f"{name} -> {news!r}")
            return self.resume(client, news)
        if isinstance(effect, Listen):
            fault = plan.pick(self.rng, ("cancel", "interrupt"))
            if fault is not None:
                return self.inject(client, fault, name)
            waiter = client.process.hub.register(effect.member)
            client.process.hub.ready = True
            self.log(f"{name} {effect.member}")
            return self.resume(client, waiter)
        if isinstance(effect, Detach):
            if plan.pick(self.rng, ("unreachable",)) is not None:
                self.faults["unreachable"] += 1
                self.log(f"{name} [unreachable] -> reclaim")
                self.renewer.reclaim(client.process.backend, effect.call, effect.lifetime, "detach")
            else:
                self.log(f"{name} {effect.call.script.name} -> {self.run_script(effect.call)!r}")
            return self.resume(client, None)
        if isinstance(effect, Noted):  # an acquire: it learns whether it went out twice
            name = f"{client.label} {type(effect.effect).__name__}"
            return self.execute_script(client, effect.effect, name, noted=True)
        if isinstance(effect, Eval | EvalWait):
            return self.execute_script(client, effect, name)
        raise AssertionError(f"unexpected effect {effect!r}")

    def execute_script(
        self, client: Client, effect: Eval | EvalWait, name: str, noted: bool = False
    ) -> None:
        call = effect.call
        fault = self.config.plan.pick(self.rng, SCRIPT_FAULTS)
        script = call.script.name
        if fault in ("crash", "cancel", "interrupt"):
            return self.inject(client, fault, f"{name} {script}")
        self.checker.asking(client, call)
        if fault == "drop_request":
            self.faults[fault] += 1
            self.log(f"{name} {script} [drop_request]")
            return self.resume(client, error=LockBackendError("simulated: request lost"))
        reply = self.run_script(call)
        if fault == "resend":
            reply = self.run_script(call)
        if fault == "late_resend":
            # The copy answered now is the resend; the first copy lands later: within the
            # request's window, or past it (the script then refuses it).
            self._seq += 1
            at = self.clock.now_ms + self.rng.randint(50, 3000)
            heapq.heappush(self.late, (at, self._seq, call))
        if fault is not None:
            self.faults[fault] += 1
        self.log(f"{name} {script}{f' [{fault}]' if fault else ''} -> {reply!r}")
        if isinstance(reply, Exception):
            return self.resume(client, error=LockBackendError(f"simulated: {reply}"))
        if fault == "drop_reply":
            return self.resume(client, error=LockBackendError("simulated: reply lost"))
        if fault == "cancel_after":
            return self.resume(client, error=asyncio.CancelledError())
        resent = fault in ("resend", "late_resend")  # what the driver's retry policy counts
        if isinstance(effect, EvalWait):
            short = self.config.plan.pick(self.rng, ("replicas_short",)) is not None
            if short:
                self.faults["replicas_short"] += 1
            acked = 0 if short else effect.replicas
            self.failover.waited_for(client, call, reply, acked)
            result: Any = (reply, acked)
        else:
            self.checker.replied(client, call, reply)
            result = reply
        return self.resume(client, Sent(result, resent) if noted else result)

    def command(self, client: Client, effect: Command) -> Any:
        """A plain command, answered at once (no step, no draw): the server's TIME, which an
        acquire reads once per process before its first attempt."""
        if effect.args != ("TIME",):
            raise AssertionError(f"unexpected command {effect!r}")
        now = self.clock.now_ms
        self.log(f"{client.label} TIME -> {now % 10_000_000}")
        return [str(now // 1000), str(now % 1000 * 1000)]

    def inject(self, client: Client, fault: str, name: str) -> None:
        self.faults[fault] += 1
        self.log(f"{name} [{fault}]")
        if fault == "crash":
            self.crash(client.process)
        else:
            error = KeyboardInterrupt() if fault == "interrupt" else asyncio.CancelledError()
            self.resume(client, error=error)

    def resume(self, client: Client, value: Any = None, error: BaseException | None = None) -> None:
        """Send the effect's result (or throw ``error``) into the operation; take its next
        effect, or finish the operation."""
        from . import actions

        try:
            effect = client.op.throw(error) if error is not None else client.op.send(value)
            while isinstance(effect, Command):
                effect = client.op.send(self.command(client, effect))
        except StopIteration as stop:
            actions.finished(self, client, stop.value, None)
        except (LockError, asyncio.CancelledError, KeyboardInterrupt) as exc:
            actions.finished(self, client, None, exc)
        else:
            actions.pending(self, client, effect)

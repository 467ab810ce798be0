"""Simulated processes and clients: owners, wake-up hubs and waiters, Backends, programs."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from django_redis_locks.core import Backend, Lock, Semaphore
from django_redis_locks.core.protocol.wake_messages import split_message
from django_redis_locks.core.runtime.holds import Hold, State

NAMESPACE = "sim"
#: How long a simulated acquire request stays valid (Backend.request_window, seconds).
REQUEST_WINDOW = 1.0
CHANNEL_PREFIX = f"{NAMESPACE}:wake"


class SimOwner:
    """Stands in for a thread or task: weak-referenceable, alive until its process dies."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.alive = True

    def is_alive(self) -> bool:
        return self.alive

    def __repr__(self) -> str:
        return f"<owner {self.name}>"


class SimWaiter:
    """A registration for wake-ups, as SyncWaiter: the latest message's news counts."""

    def __init__(self, hub: SimHub, member: str) -> None:
        self.hub = hub
        self.member = member
        self.woken = False
        self.news = ""

    def wake(self, news: str) -> None:
        self.woken, self.news = True, news

    def take(self) -> str | None:
        """What Wait returns when it ends: the news ("" for try now) if woken, else None."""
        if not self.woken:
            return None
        self.woken = False
        news, self.news = self.news, ""
        return news

    def close(self) -> None:
        self.hub.unregister(self)


class SimHub:
    """A process's wake-up hub: its channel, its waiters, whether it listens yet."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.ready = False
        self.waiters: dict[str, list[SimWaiter]] = {}

    def register(self, member: str) -> SimWaiter:
        waiter = SimWaiter(self, member)
        self.waiters.setdefault(member, []).append(waiter)
        return waiter

    def unregister(self, waiter: SimWaiter) -> None:
        group = self.waiters.get(waiter.member, [])
        if waiter in group:
            group.remove(waiter)

    def wait_ready(self, timeout: float) -> bool:
        self.ready = True
        return True

    def deliver(self, message: str) -> list[SimWaiter]:
        """Pass a message to the waiters registered for it; return them."""
        member, news = split_message(message)
        woken = list(self.waiters.get(member, ()))
        for waiter in woken:
            waiter.wake(news)
        return woken


class SimBackend(Backend):
    """A real Backend on the simulation's client whose wake-up hub is the process's own."""

    def __init__(self, client: Any, hub: SimHub) -> None:
        super().__init__(client, namespace=NAMESPACE, bound_retries=False, name="sim")
        self.sim_hub = hub
        self.checked_in = -1
        # A request that can grant is valid this long (twice a 0.5 s socket timeout): late
        # copies (50 ms to 3 s) land within it and past it, and delayed requests (up to
        # 1.5 s) are refused now and then and asked again.
        self.request_window = REQUEST_WINDOW

    def hub(self) -> Any:
        return self.sim_hub


@dataclass
class ClientSpec:
    """What one client does: which primitive, its options, how it holds."""

    kind: str  # "lock" or "sem"
    name: str
    limit: int  # 1 for a lock
    ttl: float
    mode: str  # "try", "block", "block_timeout"
    wait: float  # the timeout of "block_timeout"
    auto_renew: bool
    slice: float | None  # Lock slice_seconds (None: the default)
    replicas: int | None  # Lock wait_for_replicas
    hold_ms: tuple[int, int]
    extend: float  # chance of an extend (lock) or refresh (semaphore) while holding

    def describe(self) -> str:
        parts = [f"{self.kind} {self.name!r}"]
        if self.kind == "sem":
            parts.append(f"limit {self.limit}")
        parts.append(f"ttl {self.ttl}s {self.mode}")
        if self.mode == "block_timeout":
            parts.append(f"wait {self.wait}s")
        if self.auto_renew:
            parts.append("auto_renew")
        if self.slice is not None:
            parts.append(f"slice {self.slice}s")
        if self.replicas is not None:
            parts.append(f"wait_for_replicas={self.replicas}")
        return ", ".join(parts)

    def make(self, backend: SimBackend) -> Lock | Semaphore:
        options: dict[str, Any] = {"timeout": self.ttl, "client": backend}
        options["auto_renew"] = self.auto_renew
        if self.kind == "sem":
            return Semaphore(self.name, self.limit, **options)
        if self.slice is not None:
            options["slice_seconds"] = self.slice
        return Lock(self.name, wait_for_replicas=self.replicas, **options)


@dataclass(eq=False)
class Client:
    """One owner running a program of operations on one primitive, one effect at a time."""

    cid: int
    spec: ClientSpec
    process: SimProcess
    primitive: Lock | Semaphore
    owner: SimOwner
    phase: str = "idle"  # idle, op, holding, done
    wake_at: int = 0  # idle/holding: when the client goes on (virtual ms)
    op: Any = None  # the running operation generator
    op_kind: str = ""
    pending: Any = None  # the effect waiting to be executed
    ready_at: int = 0
    wait_deadline: int = 0
    hold: Hold | None = None  # the hold it believes in (from its acquire's return)
    queued_since: int | None = None  # fairness: queued and asking in time since
    last_ask: int = 0
    asked_before: int = 0  # last_ask before the ask on its way (restored if it came too late)
    bypassed: int = 0
    wait_fault: str | None = None  # a fault that ends the pending Wait at wait_deadline
    token: str | None = None  # the token of the running acquire (from its script's ARGV)
    ticket: float | None = None  # its place in the queue, as first seen
    role: str = "c"  # "c": a client of the config; "w": a worker a hand-off's task reached

    @property
    def label(self) -> str:
        return f"{self.role}{self.cid}"

    def believes(self, now_ms: int) -> bool:
        """Whether the client believes, now, that it holds its primitive."""
        hold = self.hold
        if hold is None or self.process.crashed or self.op_kind == "release":
            return False
        return hold.state is State.HELD and hold.expires_at * 1000 > now_ms + 0.5  # (whole ms)


@dataclass(eq=False)
class SimProcess:
    """One simulated process: a hub, a Backend, its clients' primitives."""

    pid: int
    hub: SimHub
    backend: SimBackend
    crashed: bool = False
    stale_until: int = 0  # a stale subscription: PUBLISH counts it, nothing arrives
    primitives: dict[str, Lock | Semaphore] = field(default_factory=dict)

    def primitive(self, spec: ClientSpec) -> Lock | Semaphore:
        key = f"{spec.kind}:{spec.name}:{spec.describe()}"
        if key not in self.primitives:
            self.primitives[key] = spec.make(self.backend)
        return self.primitives[key]


def draw_spec(rng: random.Random, names: list[tuple[str, str, int]]) -> ClientSpec:
    """A random client of one of ``names`` ((kind, name, limit))."""
    kind, name, limit = rng.choice(names)
    mode = rng.choice(("try", "block", "block", "block_timeout"))
    return ClientSpec(
        kind=kind,
        name=name,
        limit=limit,
        ttl=rng.choice((0.3, 1.5, 5.0, 30.0)),
        mode=mode,
        wait=rng.choice((0.05, 0.5, 2.0)),
        auto_renew=rng.random() < 0.3,
        slice=None if kind == "sem" else rng.choice((None, 0.0, 0.05)),
        replicas=None if kind == "sem" or rng.random() < 0.7 else rng.choice((0, 1)),
        hold_ms=rng.choice(((1, 20), (10, 200), (100, 2000), (500, 8000))),
        extend=rng.choice((0.0, 0.2)),
    )

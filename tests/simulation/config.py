"""What one history is made of: its seed, processes, clients, faults and length."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field, replace

from .clients import ClientSpec, draw_spec
from .faults import FaultPlan

DEFAULT_STEPS = 200


@dataclass(frozen=True)
class SimConfig:
    """A history's recipe; everything else follows from ``seed``."""

    seed: int
    steps: int
    processes: int
    clients: tuple[tuple[int, ClientSpec], ...]  # (process index, what it does)
    plan: FaultPlan = field(default_factory=FaultPlan)
    cluster: bool = False  # PUBLISH replies count only the node's own subscribers: 0
    ids: tuple[int, ...] = ()  # the clients' indexes in the seed's full config
    operator: bool = False  # an operator force-releases a live holder now and then
    replace_extend: bool = False  # a lock's extend may set the TTL (replace=True)
    failover: bool = False  # a lagging replica is promoted once or twice (failover.py)
    handoff: bool = False  # lock holders hand their holds off to workers (handoffs.py)

    @classmethod
    def draw(
        cls,
        seed: int,
        steps: int = DEFAULT_STEPS,
        cluster: bool | None = None,
        late: bool | None = None,
        extras: bool | None = None,
        replace_extend: bool | None = None,
        failover: bool | None = None,
        handoff: bool | None = None,
    ) -> SimConfig:
        """The seed's history. ``cluster``/``late`` None: DRL_SIM_CLUSTER (else a quarter of
        the seeds) and DRL_SIM_LATE (late copies of requests, on unless it is 0; see the
        README). ``extras`` (None: yes) lets the seed draw an operator, from a generator of its
        own: what the seed drew before stays the same, and a seed that draws none replays as it
        did before operators existed. ``replace_extend`` (None: DRL_SIM_REPLACE, on unless it
        is 0) lets it draw extends with replace=True too. ``failover`` (None: DRL_SIM_FAILOVER,
        off unless set) promotes a lagging replica once or twice a history (failover.py draws
        when and what from a generator of its own: the rest of the history is drawn as
        without). ``handoff`` (None: if ``extras``, drawn from a generator of its own, unless
        DRL_SIM_HANDOFF=0) lets lock holders hand their holds off to workers (handoffs.py)."""
        rng = random.Random(seed)
        # 's3c1' shares the registry bucket of 'b': a new entry there meets another's entries
        names = [("lock", "a", 1), ("sem", "s1", 1), ("sem", "s2", 2), ("sem", "s3c1", 3)]
        names = rng.sample(names, rng.randint(1, 2))
        if rng.random() < 0.3:
            names.append(("lock", "b", 1))
        processes = rng.randint(1, 3)
        count = rng.randint(2, 6)
        clients = tuple((rng.randrange(processes), draw_spec(rng, names)) for _ in range(count))
        late = env_flag("DRL_SIM_LATE", default=True) if late is None else late
        plan = FaultPlan.draw(rng, late)
        if cluster is None:
            cluster = env_flag("DRL_SIM_CLUSTER") or rng.random() < 0.25
        more, extras = random.Random(seed * 7919 + 0x0E7A), True if extras is None else extras
        operator, replacing = more.random() < 0.3, more.random() < 0.5
        handing = random.Random(seed * 104_729 + 0x4A1D).random() < 0.6
        if handoff is None:
            handoff = extras and handing and env_flag("DRL_SIM_HANDOFF", default=True)
        if replace_extend is None:
            replace_extend = os.environ.get("DRL_SIM_REPLACE", "1").strip() not in ("0", "no")
        return cls(
            seed, steps, processes, clients, plan, cluster, tuple(range(count)),
            operator=extras and operator, replace_extend=replace_extend and replacing,
            failover=env_flag("DRL_SIM_FAILOVER") if failover is None else failover,
            handoff=handoff,
        )  # fmt: skip

    def describe(self) -> list[str]:
        lines = [
            f"seed {self.seed}: {self.steps} steps, {self.processes} processes, "
            f"{'Cluster' if self.cluster else 'single server'} PUBLISH counts",
            f"faults: {self.plan.rates or 'none'}",
        ]
        if self.operator or self.replace_extend or self.failover or self.handoff:
            extras = [("an operator force-releases", self.operator)]
            extras.append(("lock holders hand off to workers", self.handoff))
            extras.append(("extends may replace the TTL", self.replace_extend))
            extras.append(("a lagging replica is promoted (failover)", self.failover))
            lines.append("; ".join(text for text, on in extras if on))
        lines += [
            f"  c{i}: process p{p}: {spec.describe()}"
            for i, (p, spec) in zip(self.ids, self.clients, strict=True)
        ]
        return lines

    def with_steps(self, steps: int) -> SimConfig:
        return replace(self, steps=steps)

    def without_client(self, index: int) -> SimConfig:
        clients = self.clients[:index] + self.clients[index + 1 :]
        return replace(self, clients=clients, ids=self.ids[:index] + self.ids[index + 1 :])

    def replay(self) -> str:
        """The environment that replays this history."""
        line = f"DRL_SIM_SEED={self.seed} DRL_SIM_STEPS={self.steps}"
        if self.ids != tuple(range(len(self.ids))) or len(self.ids) != len(self.clients):
            line += f" DRL_SIM_CLIENTS={','.join(map(str, self.ids))}"
        late = "late_resend" in self.plan.rates
        drawn = SimConfig.draw(self.seed, self.steps, self.cluster, late)
        if self.plan.rates != drawn.plan.rates:
            line += f" DRL_SIM_FAULTS={','.join(sorted(self.plan.rates))}"
        if self.cluster:
            line += " DRL_SIM_CLUSTER=1"
        if not late and "late_resend" in SimConfig.draw(self.seed, late=True).plan.rates:
            line += " DRL_SIM_LATE=0"
        if self.replace_extend:
            line += " DRL_SIM_REPLACE=1"
        if self.failover:
            line += " DRL_SIM_FAILOVER=1"
        if drawn.handoff and not self.handoff:
            line += " DRL_SIM_HANDOFF=0"
        return line


def env_flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    return value not in ("0", "false", "no")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default

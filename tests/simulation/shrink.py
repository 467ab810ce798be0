"""Shrink a failing history: fewer steps, clients and fault kinds while it still fails."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import replace

import redis

from .config import SimConfig, env_flag, env_int
from .driver import History, Simulation

Run = Callable[[SimConfig], History]


def run_history(client: redis.Redis, config: SimConfig) -> History:
    """One history, with the core's log quiet (a history logs thousands of lines)."""
    logging.disable(logging.WARNING)
    try:
        return Simulation(client, config).run()
    finally:
        logging.disable(logging.NOTSET)


def _kind(history: History) -> str:
    return history.violations[0].split(":", 1)[0] if history.violations else ""


def shrink(run: Run, failing: History, budget: int = 60) -> History:
    """A history that fails the same invariant with as few steps, clients and faults as this
    search finds in ``budget`` re-runs (greedy: each change is kept if it still fails)."""
    kind, best = _kind(failing), failing
    tries = 0

    def attempt(config: SimConfig) -> bool:
        nonlocal best, tries
        tries += 1
        history = run(config)
        if history.failed and _kind(history) == kind:
            best = replace(history, config=config.with_steps(history.steps + 1))
            return True
        return False

    attempt(best.config.with_steps(best.steps + 1))
    changed = True
    while changed and tries < budget:
        changed = False
        config = best.config
        for index in range(len(config.clients)):
            if len(config.clients) > 1 and tries < budget and attempt(config.without_client(index)):
                changed = True
                break
        if changed:
            continue
        for fault in sorted(config.plan.rates):
            if tries < budget and attempt(replace(config, plan=config.plan.without(fault))):
                changed = True
                break
    return best


def config_from_env(seed: int) -> SimConfig:
    """The config of ``seed``, narrowed as a shrunk history's replay line says:
    DRL_SIM_STEPS, DRL_SIM_CLIENTS (indexes kept), DRL_SIM_FAULTS (kinds kept)."""
    cluster = True if env_flag("DRL_SIM_CLUSTER") else None
    config = SimConfig.draw(seed, env_int("DRL_SIM_STEPS", 200), cluster=cluster)
    kept = os.environ.get("DRL_SIM_CLIENTS", "").strip()
    if kept:
        indexes = [int(i) for i in kept.split(",")]
        config = replace(config, clients=tuple(config.clients[i] for i in indexes))
    faults = os.environ.get("DRL_SIM_FAULTS")
    if faults is not None:
        keep = {f for f in faults.split(",") if f}
        rates = {k: v for k, v in config.plan.rates.items() if k in keep}
        config = replace(config, plan=replace(config.plan, rates=rates))
    return config

"""The simulation tier: many seeded histories of the protocol, every invariant after every step.

Default: DRL_SIM_HISTORIES histories (default 1,000) of DRL_SIM_STEPS steps (default 200).
DRL_SIM_SEED=<n> replays one seed (with the narrowing a shrunk history's replay line gives);
DRL_SIM_CLUSTER=1 makes every history's PUBLISH replies count 0 (a Cluster); DRL_SIM_LATE=0
leaves out late copies of requests (see the README); DRL_SIM_FAILOVER=1 promotes a lagging
replica once or twice a history (failover.py); DRL_SIM_FIRST sets the first seed of a run.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest
import redis

from .config import SimConfig, env_flag, env_int
from .driver import History
from .faults import FaultLog
from .shrink import config_from_env, run_history, shrink

pytestmark = pytest.mark.simulation

DEFAULT_HISTORIES = 1000
#: How many failing histories a run reports in full (each is shrunk first).
REPORTED = 3


def _failure(client: redis.Redis, history: History) -> str:
    shrunk = shrink(lambda config: run_history(client, config), history)
    return (
        f"\n=== seed {history.config.seed} violates {history.violations[0]}\n"
        f"--- shrunk to {shrunk.steps} steps, {len(shrunk.config.clients)} clients:\n"
        f"{shrunk.report()}\n"
    )


#: The run's time limit: about 22 histories a second here, so half a second each leaves room
#: for a slower machine (the suite's 120 s limit would cut the default run short; a quarter
#: second cut a 3,000-history run short on a loaded 2-core machine doing 4 a second).
RUN_TIMEOUT = max(120.0, env_int("DRL_SIM_HISTORIES", DEFAULT_HISTORIES) * 0.5)


def _failovers(faults: FaultLog) -> str:
    """What the failovers did (with DRL_SIM_FAILOVER), for the summary line."""
    if not faults["failover"]:
        return ""
    return (
        f"failovers: {faults['failover']} (believed holds kept {faults['failover_hold_kept']}, "
        f"of them with wait_for_replicas {faults['failover_waited_hold_kept']}; lost "
        f"{faults['failover_hold_lost']}; cut short {faults['failover_hold_cut']}; queue places "
        f"lost {faults['failover_place_lost']}; ends lost {faults['failover_end_lost']}); "
    )


@pytest.mark.timeout(RUN_TIMEOUT)
def test_histories(sim_client: redis.Redis) -> None:
    """Many seeded histories; any violation fails, with its seed and a shrunk step list.
    With DRL_SIM_SEED=<n>, that one history instead, printed in full."""
    if "DRL_SIM_SEED" in os.environ:
        history = run_history(sim_client, config_from_env(int(os.environ["DRL_SIM_SEED"])))
        print(history.report())
        assert not history.failed, history.violations
        return
    count = env_int("DRL_SIM_HISTORIES", DEFAULT_HISTORIES)
    first = env_int("DRL_SIM_FIRST", 0)
    steps_each = env_int("DRL_SIM_STEPS", 200)
    cluster = True if env_flag("DRL_SIM_CLUSTER") else None
    faults, violations = FaultLog(), Counter[str]()
    failed: list[History] = []
    steps, started = 0, time.monotonic()
    for seed in range(first, first + count):
        history = run_history(sim_client, SimConfig.draw(seed, steps_each, cluster))
        steps += history.steps
        faults.update(history.faults)
        if history.failed:
            violations[history.violations[0].split(":", 1)[0]] += 1
            failed.append(history)
    elapsed = time.monotonic() - started
    print(
        f"\nsimulation: {count} histories, {steps} steps in {elapsed:.1f} s "
        f"({count / elapsed:.1f} histories/s); {_failovers(faults)}"
        f"faults injected: {faults.line()}; "
        f"violations: {dict(violations) or 'none'}"
        + (f"; failing seeds: {[h.config.seed for h in failed][:20]}" if failed else "")
    )
    if failed:
        pytest.fail("".join(_failure(sim_client, h) for h in failed[:REPORTED]), pytrace=False)

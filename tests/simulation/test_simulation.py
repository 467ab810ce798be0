"""The simulation tier: many seeded histories of the protocol, every invariant after every step.

Default: DRL_SIM_HISTORIES histories (default 400; CI runs 2,000) of DRL_SIM_STEPS steps
(default 200), dealt to DRL_SIM_JOBS processes (default: one per core, at most 2), each with its
own server.
DRL_SIM_SEED=<n> replays one seed (with the narrowing a shrunk history's replay line gives);
DRL_SIM_CLUSTER=1 makes every history's PUBLISH replies count 0 (a Cluster); DRL_SIM_LATE=0
leaves out late copies of requests (see the README); DRL_SIM_FAILOVER=1 promotes a lagging
replica once or twice a history (failover.py); DRL_SIM_HANDOFF=0 leaves out hand-offs
(handoffs.py); DRL_SIM_FIRST sets the first seed of a run.
"""

from __future__ import annotations

import os
import time

import pytest
import redis

from .config import SimConfig, env_flag, env_int
from .driver import History
from .faults import FaultLog
from .parallel import default_jobs, run_seeds
from .shrink import config_from_env, run_history, shrink

pytestmark = pytest.mark.simulation

DEFAULT_HISTORIES = 400  # bin/test; CI runs 2,000 in a step of its own
#: How many failing histories a run reports in full (each is shrunk first).
REPORTED = 3


def _failure(client: redis.Redis, history: History) -> str:
    shrunk = shrink(lambda config: run_history(client, config), history)
    return (
        f"\n=== seed {history.config.seed} violates {history.violations[0]}\n"
        f"--- shrunk to {shrunk.steps} steps, {len(shrunk.config.clients)} clients:\n"
        f"{shrunk.report()}\n"
    )


#: The run's time limit: about 12 histories a second per process here, so half a second each
#: (whatever the processes) leaves room for a slower machine (the suite's 120 s limit would cut
#: the default run short; a quarter second cut a 3,000-history run short on a loaded 2-core
#: machine doing 4 a second).
RUN_TIMEOUT = max(120.0, env_int("DRL_SIM_HISTORIES", DEFAULT_HISTORIES) * 0.5)


def _failovers(faults: FaultLog) -> str:
    """What the failovers did (with DRL_SIM_FAILOVER), for the summary line."""
    if not faults["failover"]:
        return ""
    return (
        f"failovers: {faults['failover']} (believed holds kept {faults['failover_hold_kept']}, "
        f"of them with wait_for_replicas {faults['failover_waited_hold_kept']}; lost "
        f"{faults['failover_hold_lost']}; cut short {faults['failover_hold_cut']}; queue places "
        f"lost {faults['failover_place_lost']}, kept with an older lease "
        f"{faults['failover_lease_lost']}; ends lost {faults['failover_end_lost']}); "
    )


def _handoffs(faults: FaultLog) -> str:
    """What the hand-offs did (handoffs.py), for the summary line."""
    if not faults["handoff"]:
        return ""
    return (
        f"hand-offs: {faults['handoff']} (refused {faults['handoff_refused']}, evicted "
        f"{faults['handoff_evicted']}); take-overs: {faults['take_over']} (a second worker "
        f"{faults['take_over_again']}; taken over {faults['take_over_taken']}; refused: spent "
        f"{faults['take_over_spent']}, expired {faults['take_over_expired']}, evicted "
        f"{faults['take_over_evicted']}, stale ticket {faults['take_over_stale']}; unknown "
        f"outcome {faults['take_over_unknown']}, interrupted {faults['take_over_interrupted']}; "
        f"late copies {faults['late_take_over']}); "
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
    jobs = default_jobs()
    started = time.monotonic()
    tally = run_seeds(first, count, steps_each, cluster, jobs, RUN_TIMEOUT - 30)
    elapsed = time.monotonic() - started
    assert not tally.error, tally.error
    assert tally.histories == count
    print(
        f"\nsimulation: {count} histories, {tally.steps} steps in {elapsed:.1f} s "
        f"({count / elapsed:.1f} histories/s, {jobs} processes); {_failovers(tally.faults)}"
        f"{_handoffs(tally.faults)}"
        f"faults injected: {tally.faults.line()}; "
        f"violations: {dict(tally.violations) or 'none'}"
        + (f"; failing seeds: {tally.failed[:20]}" if tally.failed else "")
    )
    failed = [
        run_history(sim_client, SimConfig.draw(seed, steps_each, cluster))
        for seed in tally.failed[:REPORTED]
    ]
    if failed:
        pytest.fail("".join(_failure(sim_client, h) for h in failed[:REPORTED]), pytrace=False)

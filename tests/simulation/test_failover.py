"""Failover histories in the default run: a handful of seeds, each with a failover that does
what it is chosen for (see failover.py; DRL_SIM_FAILOVER=1 runs many)."""

from __future__ import annotations

import pytest
import redis

from .config import SimConfig
from .shrink import run_history

pytestmark = pytest.mark.simulation

#: (seed, Cluster PUBLISH counts, what its failovers show: a count of the history's faults;
#: drawn without hand-offs, which came later)
CHOSEN = [
    (0, False, "failover_waited_hold_kept"),  # two wait_for_replicas holds kept, over 2 failovers
    (4, False, "failover_overlap"),  # a lost hold still believed while another client holds
    (5, False, "failover_hold_cut"),  # an extension lost: the hold ends earlier than believed
    (25, False, "failover_fence_back"),  # the lock goes back to an earlier holder and fence
    (98, False, "failover_place_lost"),  # waiters' places lost: they queue anew
    (4, True, "failover_overlap"),  # the same on Cluster PUBLISH counts
    (27, True, "failover_lease_lost"),  # a place kept, but with a lease older than its asks
]


@pytest.mark.parametrize(
    ("seed", "cluster", "shows"), CHOSEN, ids=[f"seed{s}-{w[9:]}" for s, _, w in CHOSEN]
)
def test_failover_history(sim_client: redis.Redis, seed: int, cluster: bool, shows: str) -> None:
    config = SimConfig.draw(
        seed, cluster=cluster, late=True, replace_extend=True, failover=True, handoff=False
    )
    history = run_history(sim_client, config)
    assert not history.failed, history.report()
    assert history.faults["failover"] >= 1 and history.faults[shows] >= 1, history.report()

"""Histories that once broke a promise, kept as regression tests: each seed replays exactly.

Found on d238e2d (before the hand-over rework) by this tier:

- Cluster PUBLISH counts (a hand-over's PUBLISH replies 0): the waiter believed a 30 s hold
  that Redis kept for the 1 s window only (belief_within_redis);
- a semaphore admission confirmed without refreshing the keys' expiries: keys with no expiry,
  or one earlier than their holders (keys_expire, keys_outlive_contents, registry_covers_holds);
- a waiter with wait_for_replicas woken, dequeued and queued again at the back
  (fifo_place_kept).
"""

from __future__ import annotations

import pytest
import redis

from .config import SimConfig
from .shrink import run_history

pytestmark = pytest.mark.simulation

#: (seed, Cluster PUBLISH counts, the invariant it broke on d238e2d)
FOUND = [
    (1, True, "belief_within_redis"),  # lock 'b', ttl 30 s, kept 1 s
    (28, True, "belief_within_redis"),  # semaphore 's1', ttl 30 s, kept 1 s
    (3, False, "keys_expire"),  # semaphore holders key with no expiry
    (33, False, "keys_outlive_contents"),  # semaphore keys expiring before their holders
    (41, False, "keys_outlive_contents"),
    (74, True, "fifo_place_kept"),  # lock waiter with wait_for_replicas=0 re-queued
    (4, False, "fifo_place_kept"),  # lock waiter with wait_for_replicas=1 re-queued
]

#: A late copy of an acquire request (sent again after a lost reply, the first copy arriving
#: after the hold was released) re-queued or re-granted the released token, for nobody, for
#: its TTL (ends_as_redis_saw): before requests carried a deadline in server time and a hold
#: whose acquire went out twice was watched after it ended, seed 134 re-granted a semaphore
#: slot for its 30 s TTL and seed 2 handed lock 'b' to the released token. Now a copy past its
#: deadline is refused ({-3, now_ms}), and one within it is undone by the watch. These
#: histories need late copies (DRL_SIM_LATE).
LATE_COPIES = [134, 2]


@pytest.mark.parametrize(
    ("seed", "cluster", "broke"), FOUND, ids=[f"seed{s}-{b}" for s, _, b in FOUND]
)
def test_found_history(sim_client: redis.Redis, seed: int, cluster: bool, broke: str) -> None:
    config = SimConfig.draw(seed, cluster=cluster, late=False, extras=False)  # as recorded
    history = run_history(sim_client, config)
    assert not history.failed, history.report()


@pytest.mark.parametrize("seed", LATE_COPIES)
def test_late_copy_of_an_acquire(sim_client: redis.Redis, seed: int) -> None:
    config = SimConfig.draw(seed, cluster=False, late=True, extras=False)  # as recorded
    history = run_history(sim_client, config)
    assert not history.failed, history.report()


#: Found by this tier: an extend(replace=True) that shortened a hold and whose reply was lost
#: (the script ran) left the client believing the longer hold it had: seed 355 (Cluster
#: PUBLISH counts) sets lock 'a' to 0.1 s, the reply is lost, and the client believed it until
#: t+975 ms while Redis kept it 96 ms (belief_within_redis). Lock.extend now lowers its belief
#: before it sends a shortening extend. (seed, Cluster PUBLISH counts)
REPLACING_EXTENDS = [(355, True)]


@pytest.mark.parametrize(("seed", "cluster"), REPLACING_EXTENDS)
def test_shortening_extend_with_a_lost_reply(
    sim_client: redis.Redis, seed: int, cluster: bool
) -> None:
    config = SimConfig.draw(seed, cluster=cluster, late=False, replace_extend=True)
    history = run_history(sim_client, config)
    assert not history.failed, history.report()


#: Found by the long run on the protocol with acquire deadlines (seeds 200,000-214,999).
#: Seed 206855 (no late copy needed): a waiter's token, cancelled while a release handed it the
#: lock, was released by the clean-up within its slice, which reserved the lock for its
#: session; the session's next acquire (a token queued behind a live waiter) took the reserved
#: lock and stayed queued (position_reported, handed_to_live_waiter). lock_acquire now takes a
#: token out of the queue whenever it grants the lock within a reservation. Seed 209763 (late
#: copies) was the invariant's: a late copy of a semaphore waiter's own request confirmed its
#: admission (the reply nobody reads), the slot's TTL ran out before the waiter asked again,
#: and it queued anew; the waiter was served, so its place ended (fifo_place_kept now says
#: so). (seed, the invariant it broke)
FOUND_LATE = [(206855, "position_reported"), (209763, "fifo_place_kept")]


@pytest.mark.parametrize(("seed", "broke"), FOUND_LATE, ids=[f"seed{s}-{b}" for s, b in FOUND_LATE])
def test_history_of_the_third_long_run(sim_client: redis.Redis, seed: int, broke: str) -> None:
    config = SimConfig.draw(seed, cluster=False, late=True, extras=True, replace_extend=True)
    history = run_history(sim_client, config)
    assert not history.failed, history.report()


#: Found by the failover run (seeds 700,000-705,499). Seed 703732 was the check's: after a
#: failover the replica still had the queue place of a semaphore holder whose confirmation it
#: lost; the holder's renewal (sem_refresh) then changed the expiry of a token that was both
#: holding and queued, which handed_to_live_waiter took for an admission to a dead place. Only
#: acquires and releases hand over or admit now. Seed 705154: a failover restored queue places
#: so that the token a release had handed the lock to was no longer first in the queue; its
#: holder's clean-up released the unconfirmed hand-over, and lock_release, which took the
#: holder out of the queue only when it was the head, left the token queued
#: (released_token_gone): no two holders, but the place cost the waiters behind it up to its
#: lease and a hand-over window. lock_release now takes the holder out wherever it is. (seed)
FOUND_FAILOVER = [703732, 705154]


@pytest.mark.parametrize("seed", FOUND_FAILOVER)
def test_history_of_the_failover_run(sim_client: redis.Redis, seed: int) -> None:
    config = SimConfig.draw(seed, late=True, replace_extend=True, failover=True)
    history = run_history(sim_client, config)
    assert not history.failed, history.report()


#: Found by the fifth long run (Cluster PUBLISH counts and failovers, seeds 800,000-899,999 at
#: 7b210d2: 100,000 histories, 15,383,990 steps, 102,770 failovers), open. No two holders of a
#: lock and no semaphore over its limit among them. Seed 835107: an auto-renewal's reply
#: raised the belief of a hold while an extend(replace=True) that shortened it was in flight,
#: and that extend's reply was lost: the holder believed 200 ms longer than Redis kept
#: (belief_within_redis). The others are not analysed yet: a hold reported lost while Redis
#: kept its token's place in a queue (ends_as_redis_saw), a waiter whose place moved back
#: (fifo_place_kept), a force-release reported as a failed renewal (forced_reported).
#: (seed, the invariant it broke)
OPEN_LONG_RUN = [
    (800684, "fifo_place_kept"),
    (807622, "fifo_place_kept"),
    (816587, "ends_as_redis_saw"),
    (829028, "ends_as_redis_saw"),
    (835107, "belief_within_redis"),
    (836172, "fifo_place_kept"),
    (855638, "ends_as_redis_saw"),
    (858259, "ends_as_redis_saw"),
    (873151, "forced_reported"),
    (878329, "ends_as_redis_saw"),
    (878630, "fifo_place_kept"),
    (899174, "ends_as_redis_saw"),
]


@pytest.mark.xfail(
    strict=True, reason="open: found by the fifth long run, not analysed or fixed yet"
)
@pytest.mark.parametrize(
    ("seed", "broke"), OPEN_LONG_RUN, ids=[f"seed{s}" for s, _ in OPEN_LONG_RUN]
)
def test_open_history_of_the_fifth_long_run(sim_client: redis.Redis, seed: int, broke: str) -> None:
    config = SimConfig.draw(seed, cluster=True, late=True, replace_extend=True, failover=True)
    history = run_history(sim_client, config)
    assert not history.failed, history.report()

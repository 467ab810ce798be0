"""Scenario 4: Redis killed (SIGKILL) and restarted without persistence while worker processes
hold auto-renewed locks and a semaphore slot.

Pass rule: every holder learns of the loss (``on_lost``) within one renewal interval (a third
of the TTL) plus a margin after the server is back; a holder without renewal finds it out at
its next ``ensure_held()``; the next grant of each name, on the empty server, has a larger
fence than the lost one. What cannot be helped is measured: a new holder may take a lost lock
at once, while its old holder still believes it holds it until it has noticed the loss.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from django_redis_locks.core import Backend, Lock
from tests.chaos.processes import Holder, Processes, worker_command

pytestmark = pytest.mark.chaos

TTL = 1.5
RENEWAL_INTERVAL = TTL / 3
MARGIN = 0.35  # the renewer's retry after the failed rounds, and a loaded machine


def test_holders_learn_of_a_restart_without_persistence_within_a_renewal_interval(
    processes: Processes, make_server: Any, namespace: str, figures: dict[str, Any]
) -> None:
    server = make_server()

    def holder(name: str, **options: object) -> Holder:
        command = worker_command(
            "holder",
            url=server.url,
            namespace=namespace,
            name=name,
            ttl=TTL,
            socket_timeout=0.5,
            **options,
        )
        return Holder(processes, command)

    renewed = [holder(f"restart-{index}", auto_renew=True) for index in range(3)]
    renewed.append(holder("restart-sem", kind="semaphore", limit=2, auto_renew=True))
    plain = holder("restart-plain")
    assert all(h.held["acquired"] for h in [*renewed, plain])
    server.restart(kill=True)
    back_at = time.monotonic()
    with server.client(socket_timeout=5) as client:
        assert client.dbsize() == 0  # the data is gone
        backend = Backend(client, namespace=namespace)
        successors = [Lock(f"restart-{index}", client=backend, timeout=TTL) for index in range(3)]
        for lock in successors:
            assert lock.acquire(blocking=False)  # at once: the lost locks are free
        taken_at = time.monotonic()
        lost = [h.wait_for("lost", timeout=TTL * 2) for h in renewed]
        plain_answer = plain.ask("ensure")["error"]
        noticed = [event["at"] / 1e9 - back_at for event in lost]
        old_fences = [h.held["fence"] for h in [*renewed[:3], plain]]
        plain_successor = Lock("restart-plain", client=backend, timeout=TTL)
        assert plain_successor.acquire(blocking=False)
        new_fences = [lock.fence for lock in [*successors, plain_successor]]
        figures.update(
            ttl_s=TTL,
            renewal_interval_s=round(RENEWAL_INTERVAL, 3),
            loss_noticed_after_the_restart_s=[round(n, 3) for n in noticed],
            reasons=sorted({event["reason"] for event in lost}),
            unrenewed_holder_told=plain_answer,
            old_fences=old_fences,
            new_fences=new_fences,
            two_holders_believed_they_held_for_at_most_s=round(
                max(event["at"] / 1e9 for event in lost[:3]) - taken_at, 3
            ),
        )
        assert all(n <= RENEWAL_INTERVAL + MARGIN for n in noticed)
        assert plain_answer == "LockLost"
        assert all(
            new is not None and new > old for old, new in zip(old_fences, new_fences, strict=True)
        )
        for h in renewed:
            assert h.ask("ensure")["error"] == "LockLost"
        for lock in [*successors, plain_successor]:
            lock.release()
        backend.close()

"""The checks run on every deployment, each filling the deployment's figures:

- :func:`no_overlap`: concurrent calls of a blocking decorated function run one at a time
  (a sweep of their logged intervals), while the same load on an undecorated one overlaps;
- :func:`contention`: a call that cannot have the lock is refused as documented (409 with
  ``Retry-After`` for a view, ``SKIPPED`` for a task), and a blocking one waits, then runs;
- :func:`renewal`: a hold renewed past its 1 s TTL refuses every other caller for the whole
  run, which ends without ``LockLost``;
- :func:`sigkill`: a holder killed with SIGKILL frees the name within its TTL.
"""

from __future__ import annotations

import time

from tests.deploy import sweep
from tests.deploy.deployment import Call, Deployment
from tests.deploy.project.section import ATTEMPT_TTL, RENEWED_TTL

CALLS = 8  # concurrent calls: more than any deployment runs at once
SECTION_SECONDS = 0.15  # how long each of them stays inside
HOLD_SECONDS = 2.0  # the holder of the contention check
TRIES = 3  # refused calls asked for while it holds
RENEWAL_SECONDS = 3.5  # the renewed hold: more than 3 TTLs
KILLED_HOLD_SECONDS = 60.0  # the holder that is SIGKILLed never ends by itself
POLL_SECONDS = 0.02


def _failed(calls: list[Call]) -> list[str]:
    return [call.error or repr(call) for call in calls if not call.ran]


def no_overlap(deployment: Deployment) -> None:
    calls = deployment.call_many("locked", "overlap", CALLS, SECTION_SECONDS)
    assert _failed(calls) == [], f"{_failed(calls)}\n{deployment.describe()}"
    runs = sweep.spans(deployment.log, "overlap")
    control_calls = deployment.call_many("bare", "control", CALLS, SECTION_SECONDS)
    assert _failed(control_calls) == [], f"{_failed(control_calls)}\n{deployment.describe()}"
    control = sweep.spans(deployment.log, "control")
    callers = {
        (r["pid"], r["thread"]) for r in sweep.records(deployment.log) if r["name"] == "overlap"
    }
    deployment.figures.update(
        runs=len(runs),
        max_concurrency=sweep.peak(runs),
        control_runs=len(control),
        control_max_concurrency=sweep.peak(control),
        callers_seen=len(callers),  # distinct (process, thread) that ran them
        serial_s=round(runs[-1][1] - runs[0][0], 3) if runs else None,
    )
    assert len(runs) == CALLS
    assert sweep.overlaps(runs) == [], "runs under the lock overlapped"
    assert sweep.peak(runs) == 1
    # The same load without the lock does overlap: the sweep would have seen it.
    assert len(control) == CALLS
    assert sweep.peak(control) >= 2, f"the control never overlapped: {control}"


def contention(deployment: Deployment) -> None:
    holder = deployment.begin("attempt", "contention", HOLD_SECONDS)
    deployment.wait_held("contention")
    tries = [deployment.attempt("contention") for _ in range(TRIES)]
    waiter = deployment.begin("locked", "contention", 0)  # blocking: waits for the holder
    held = deployment.finish(holder, HOLD_SECONDS + 30)
    waited = deployment.finish(waiter, HOLD_SECONDS + 30)
    deployment.figures.update(
        contention_answers=sum(call.refused for call in tries),
        retry_after=[call.retry_after for call in tries if call.retry_after is not None],
    )
    assert held.ran, f"{held}\n{deployment.describe()}"
    for call in tries:
        assert call.refused, f"a call got in while the lock was held: {call}"
        assert not call.ran
    # (a task's refusal is its result SKIPPED, the skip_result of on_contention="skip")
    if deployment.server == "gunicorn":  # views: 409 Conflict with Retry-After >= 1
        assert all(call.retry_after is not None and call.retry_after >= 1 for call in tries)
    assert waited.ran, f"{waited}\n{deployment.describe()}"
    assert held.record is not None and waited.record is not None
    assert waiter.sent_at < held.record["end"], "the blocking call came after the hold"
    assert waited.record["start"] >= held.record["end"], "the blocking call did not wait"
    deployment.figures["blocking_waited_s"] = round(waited.record["start"] - waiter.sent_at, 3)
    assert sweep.overlaps(sweep.spans(deployment.log, "contention")) == []


def renewal(deployment: Deployment) -> None:
    holder = deployment.begin("renewed", "renewal", RENEWAL_SECONDS)
    first = deployment.wait_held("renewal")
    seen_at = time.monotonic()
    refused_at: list[float] = []
    while time.monotonic() < seen_at + RENEWAL_SECONDS - 0.5:  # ends before the holder does
        call = deployment.attempt("renewal")
        assert call.refused and not call.ran, f"a call got in during the renewed hold: {call}"
        refused_at.append(time.monotonic())
        time.sleep(0.1)
    last = deployment.holder("renewal")
    held = deployment.finish(holder, RENEWAL_SECONDS + 30)
    assert held.ran, f"the renewed hold did not end well: {held}\n{deployment.describe()}"
    assert held.record is not None
    lasted = held.record["end"] - held.record["start"]
    deployment.figures.update(
        renewal_ttl_s=RENEWED_TTL,
        renewal_held_s=round(lasted, 3),
        renewal_refusals=len(refused_at),
        renewal_refused_until_s=round(refused_at[-1] - held.record["start"], 3),
    )
    assert lasted >= RENEWAL_SECONDS - 0.05
    assert last is not None and last.holder_id == first.holder_id, "the hold changed hands"
    # Refused long after the TTL would have let the name go without renewal.
    assert refused_at[-1] - held.record["start"] > 2 * RENEWED_TTL
    assert "LockLost" not in deployment.describe()
    assert deployment.holder("renewal") is None, "the hold was not released"


def sigkill(deployment: Deployment) -> None:
    deployment.begin("attempt", "killed", KILLED_HOLD_SECONDS)
    info = deployment.wait_held("killed")
    assert info.pid is not None
    leader = any(service.pid == info.pid for service in deployment.services)
    # gunicorn's workers and Celery's prefork pool are children of the server's main process
    assert leader is not deployment.children_hold, f"{info.pid} holds, {deployment.services}"
    assert not deployment.probe("killed"), "the probe got a held lock"
    deployment.sigkill(info.pid)
    killed_at = time.monotonic()
    deadline = killed_at + ATTEMPT_TTL + 5
    while not deployment.probe("killed"):
        assert time.monotonic() < deadline, f"still held {deadline - killed_at:.0f} s after"
        time.sleep(POLL_SECONDS)
    freed_after = time.monotonic() - killed_at
    deployment.figures.update(
        killed="main process" if leader else "child process",
        kill_ttl_s=ATTEMPT_TTL,
        kill_to_free_s=round(freed_after, 3),
    )
    assert freed_after <= ATTEMPT_TTL + 1

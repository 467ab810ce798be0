"""Scenario 2: a holder paused (SIGSTOP) past its TTL, overtaken, then continued.

The holder and the one that overtakes it are worker processes that write to one SQLite
database through the Django ORM with the fencing check of docs/guarantees.md. When the paused
holder runs again, its stale write changes no row, and its first lock call raises
``LockLost`` (the next ones ``LockNotOwned``: the lost hold is forgotten).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chaos.processes import Holder, Processes, worker_command

pytestmark = pytest.mark.chaos

TTL = 1.0
CALLS = ("ensure", "extend", "release")


@pytest.mark.parametrize("first_call", CALLS)
def test_a_holder_paused_past_its_ttl_loses_the_lock_and_its_stale_write_is_refused(
    processes: Processes,
    redis_server: Any,
    namespace: str,
    tmp_path: Path,
    figures: dict[str, Any],
    first_call: str,
) -> None:
    command = worker_command(
        "holder",
        url=redis_server.url,
        namespace=namespace,
        name="account:1",
        ttl=TTL,
        auto_renew=True,  # renewals do not help a process that is stopped
        db=tmp_path / "accounts.sqlite3",
    )
    stale = Holder(processes, command)
    assert stale.held["acquired"]
    assert stale.ask("write 100.00")["ok"] == 1  # its write while it held the lock
    stale.pause()
    newer = Holder(processes, command)  # blocks until the stopped holder's TTL runs out
    took_over_after = (newer.held["at"] - stale.held["at"]) / 1e9
    assert newer.held["acquired"]
    assert newer.held["fence"] > stale.held["fence"]
    assert newer.ask("write 200.00")["ok"] == 1
    stale.resume()
    stale_write = stale.ask("write 300.00")["ok"]  # as if it went on without checking
    answers = {first_call: stale.ask(first_call)["error"]}
    for call in CALLS:
        if call != first_call:
            answers[call] = stale.ask(call)["error"]
    lost = stale.wait_for("lost", timeout=5)
    row = newer.ask("read")["ok"]
    newer_release = newer.ask("release")["error"]
    figures.update(
        ttl_s=TTL,
        stale_fence=stale.held["fence"],
        newer_fence=newer.held["fence"],
        taken_over_after_s=round(took_over_after, 3),
        stale_write_rows=stale_write,
        answers_after_resume=answers,
        on_lost_reason=lost["reason"],
        final_row=row,
    )
    assert stale_write == 0, "the stale holder's fenced write was not refused"
    assert answers == {call: "LockLost" if call == first_call else "LockNotOwned" for call in CALLS}
    assert row == {"balance": "200.00", "fence": newer.held["fence"]}
    assert newer_release is None
    assert TTL / 2 < took_over_after < TTL + 5  # not before the stopped holder's TTL ran out
    assert not [event for event in stale.seen if event["event"] == "lost"]  # on_lost: once

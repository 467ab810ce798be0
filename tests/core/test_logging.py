"""Log lines: one per phase (acquire, release, lost, renew, force_release), each naming the hold
by its holder id, never by its token."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from django_redis_locks import Lock, LockBackendError, LockLost
from django_redis_locks.core import Backend
from django_redis_locks.core.registry import force_release
from tests.harness import clients
from tests.harness.servers import wait_until


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(record.levelname, record.getMessage()) for record in caplog.records]


def test_each_phase_logs_a_line_naming_the_holder_id_not_the_token(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="django_redis_locks")
    tokens: list[str] = []

    # acquire, contention, release
    lock = Lock("logged", client=backend, timeout=5)
    assert lock.acquire()
    first_id = lock.holder_id
    tokens.append(lock._current_hold().token)  # type: ignore[union-attr]
    assert not Lock("logged", client=backend, timeout=5).acquire(blocking=False)
    lock.release()

    # force release, then the evicted holder's renewer finds the loss
    lost = Lock("logged-lost", client=backend, timeout=0.6, auto_renew=True)
    assert lost.acquire()
    lost_id = lost.holder_id
    tokens.append(lost._current_hold().token)  # type: ignore[union-attr]
    assert lost_id is not None
    assert force_release("logged-lost", lost_id, client=backend, by="ops@example")
    wait_until(
        lambda: any(m.startswith("lost:") for _, m in _lines(caplog)),
        timeout=0.6 / 3 + 1.0,
        what="the renewer to report the loss",
    )
    with pytest.raises(LockLost):
        lost.ensure_held()

    # a thread that ends holding an auto-renewed lock: the renewer stops renewing it
    abandoned = Lock("logged-abandoned", client=backend, timeout=0.6, auto_renew=True)
    worker = threading.Thread(target=abandoned.acquire)
    worker.start()
    worker.join()
    wait_until(
        lambda: any(m.startswith("renew: stopped renewing") for _, m in _lines(caplog)),
        timeout=0.6 / 3 + 1.0,
        what="the renewer to drop the abandoned hold",
    )

    lines = _lines(caplog)
    expected = [
        ("DEBUG", f"acquire: lock 'logged' (holder {first_id}, fence "),
        ("DEBUG", "acquire: lock 'logged' is taken"),
        ("DEBUG", f"release: lock 'logged' (holder {first_id})"),
        ("WARNING", f"force_release: lock 'logged-lost' (holder {lost_id}) by ops@example"),
        ("WARNING", f"lost: lock 'logged-lost' (holder {lost_id}): "),
        ("WARNING", "renew: stopped renewing: the owner of lock 'logged-abandoned' ended"),
    ]
    for level, start in expected:
        assert any(lv == level and m.startswith(start) for lv, m in lines), (start, lines)
    for token in tokens:
        assert not any(token[:12] in m for _, m in lines)


def test_an_acquire_refused_beside_a_renewed_hold_logs_its_clean_up_not_a_renewal(
    make_server: Any, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 23: the server refuses connections, an acquire fails, and its clean-up (the
    token-checked release of an acquire whose reply never came) goes out on the renewer's
    lane. An auto-renewed hold on that server, not due yet, is renewed early in the same
    round (renewals due within a sixth of their TTL go along). The line saying the server
    cannot be reached named the round "renew" because a renewal went along, and nothing
    else: it sent the operator to renewal for an acquire that failed. Each phase now says
    what of its own work could not reach the server."""
    ttl = 9.0  # renewed 3 s after the grant, taken along from 1.5 s
    server = make_server()
    with clients.sync_from_url(server.url, socket_timeout=0.5) as client:
        backend = Backend(client, namespace=namespace)
        held = Lock("held", client=backend, timeout=ttl, auto_renew=True)
        assert held.acquire()
        granted = time.monotonic()
        caplog.set_level(logging.WARNING, logger="django_redis_locks")
        time.sleep(max(0.0, granted + ttl / 6 + 0.3 - time.monotonic()))  # not due yet
        server.kill()
        with pytest.raises(LockBackendError, match="refused"):
            Lock("refused", client=backend, timeout=5).acquire()
        assert time.monotonic() < granted + ttl / 3, "too slow: the renewal was due already"

        def lines() -> list[str]:
            found = [record.getMessage() for record in caplog.records]
            return [line for line in found if "cannot be reached" in line]

        deadline = time.monotonic() + 2  # (a line for each phase, or what came instead)
        while len(lines()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        backend.close()
    assert len(lines()) == 2, lines()
    reclaim, renew = sorted(lines())
    assert reclaim.startswith(
        f"reclaim: {backend.name} cannot be reached by the clean-up of an acquire whose reply "
        "never came (lock 'refused'); retrying: "
    ), lines()
    assert renew.startswith(
        f"renew: {backend.name} cannot be reached by the renewal of lock 'held'; retrying: "
    ), lines()
    assert "refused" in reclaim and "'refused'" not in renew

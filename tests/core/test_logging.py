"""Log lines: one per phase (acquire, release, lost, renew, force_release), each naming the hold
by its holder id, never by its token."""

from __future__ import annotations

import logging
import threading

import pytest

from django_redis_locks import Lock, LockLost
from django_redis_locks.core import Backend
from django_redis_locks.core.registry import force_release
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

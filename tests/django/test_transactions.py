"""Holds that follow the database transaction (``release_on_commit``, ``hold_until_commit``):
released when the transaction commits or rolls back, renewed while they wait.

Each test asks Redis itself (the lock listing) whether the name is held, at each point of the
transaction. The lost-update race these holds prevent is shown on a real PostgreSQL in
``test_transactions_postgres.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from django.db import transaction
from django.db.transaction import TransactionManagementError

from django_redis_locks import (
    InvalidArgument,
    InvalidArgumentType,
    Lock,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    redis_lock,
)
from django_redis_locks.inspection import force_release, get_lock
from django_redis_locks.transactions import hold_until_commit, release_on_commit

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])

NAME = "invoice:7"


@pytest.fixture(autouse=True)
def _namespace(settings: Any, namespace: str) -> None:
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}


def held(name: str = NAME) -> bool:
    """Whether ``name`` is held, as Redis says (the listing)."""
    return get_lock(name) is not None


def taken_elsewhere(name: str = NAME) -> bool:
    """Whether another thread is refused ``name`` right now (it takes and gives back what it
    gets)."""
    refused: list[bool] = []

    def attempt() -> None:
        lock = Lock(name, blocking=False)
        got = lock.acquire()
        if got:
            lock.release()
        refused.append(not got)

    thread = threading.Thread(target=attempt)
    thread.start()
    thread.join(10)
    return refused[0]


@redis_lock("invoice:{pk}", release_on_commit=True)
def update(pk: int) -> bool:
    return held(f"invoice:{pk}")


@redis_lock("invoice:{pk}", release_on_commit=True)
def failing_update(pk: int) -> None:
    raise ValueError("the update failed")


@redis_lock("invoice:{pk}", release_on_commit=True, database="other")
def update_other(pk: int) -> bool:
    return held(f"invoice:{pk}")


@redis_lock("invoice:{pk}")
def update_released_at_return(pk: int) -> bool:
    return held(f"invoice:{pk}")


def test_the_hold_lasts_until_the_commit_and_after_the_callbacks_registered_before_it() -> None:
    at_commit: list[bool] = []
    with transaction.atomic():
        transaction.on_commit(lambda: at_commit.append(held()))  # (e.g. a task's enqueue)
        assert update(7) is True
        assert held(), "released when the function returned"
        assert taken_elsewhere()
    assert at_commit == [True]
    assert not held()
    assert not taken_elsewhere()


def test_released_at_return_without_the_option() -> None:
    with transaction.atomic():
        assert update_released_at_return(7) is True
        assert not held()


def test_a_rollback_releases_the_hold() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        update(7)
        assert held()
        raise RuntimeError("roll back")
    assert not held()
    assert not taken_elsewhere()


def test_a_call_that_raises_keeps_the_hold_for_its_transaction() -> None:
    """What it wrote before it raised is in the transaction: a caller that catches the error
    and commits commits that too, so the hold waits for the commit."""
    with transaction.atomic():
        with pytest.raises(ValueError, match="the update failed"):
            failing_update(7)
        assert held()
    assert not held()


def test_a_savepoint_rolled_back_releases_the_hold_taken_in_it() -> None:
    with transaction.atomic():
        with pytest.raises(RuntimeError), transaction.atomic():
            update(7)
            raise RuntimeError("roll back the savepoint")
        assert not held(), "the savepoint's writes are gone: so is the hold"
        assert update(7) is True  # and the name can be had again in the same transaction
        assert held()
    assert not held()


def test_a_savepoint_released_keeps_the_hold_until_the_outer_commit() -> None:
    with transaction.atomic():
        with transaction.atomic():
            update(7)
        assert held(), "a released savepoint's writes are committed only with the outer block"
    assert not held()


def test_an_outer_rollback_releases_a_hold_taken_in_a_released_savepoint() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        with transaction.atomic():
            update(7)
        assert held()
        raise RuntimeError("roll back everything")
    assert not held()


def test_an_inner_savepoint_rolled_back_leaves_a_hold_taken_outside_it() -> None:
    with transaction.atomic():
        update(7)
        with pytest.raises(RuntimeError), transaction.atomic():
            raise RuntimeError("roll back the savepoint only")
        assert held()
    assert not held()


def test_a_durable_block_releases_at_its_commit() -> None:
    with transaction.atomic(durable=True):
        update(7)
        assert held()
    assert not held()


def test_outside_a_transaction_the_hold_is_released_at_return() -> None:
    assert update(7) is True
    assert not held()


def test_the_hold_follows_the_transaction_of_the_database_it_names() -> None:
    with transaction.atomic(using="other"):
        assert update_other(7) is True
        assert held()
    assert not held()
    # a transaction on "default" only: "other" is in autocommit, nothing to wait for
    with transaction.atomic():
        update_other(7)
        assert not held()


def test_a_later_call_of_the_same_name_in_the_transaction_runs_under_its_hold() -> None:
    """A transaction never waits for itself: the second call (non-blocking, as the
    decorator's default) is not refused."""
    with transaction.atomic():
        assert update(7) is True
        first = get_lock(NAME)
        assert update(7) is True
        second = get_lock(NAME)
        assert first is not None and second is not None
        assert second.holder_id == first.holder_id, "a second hold was taken"
        assert taken_elsewhere()
    assert not held()


def test_the_hold_is_renewed_while_it_waits_for_the_commit() -> None:
    @redis_lock("slow:{pk}", timeout=1, release_on_commit=True)
    def slow(pk: int) -> None:
        pass

    with transaction.atomic():
        slow(1)
        time.sleep(2.5)  # (the transaction's own work: 2.5 TTLs)
        assert held("slow:1")
        assert taken_elsewhere("slow:1")
    assert not held("slow:1")


def test_a_hold_lost_before_the_commit_is_logged_at_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, "django_redis_locks.transactions"):
        with transaction.atomic():
            update(7)
            info = get_lock(NAME)
            assert info is not None
            assert force_release(NAME, info.holder_id, by="an operator")
        lost = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(lost) == 1
    assert "lost before its transaction committed" in lost[0].getMessage()


def test_hold_until_commit_takes_the_lock_and_keeps_it_until_the_commit() -> None:
    lock = Lock(NAME, auto_renew=True, blocking=False)
    with transaction.atomic():
        with hold_until_commit(lock):
            assert held()
        assert held()
        with hold_until_commit(Lock(NAME, auto_renew=True, blocking=False)):
            pass  # the transaction's own hold: not refused
        with pytest.raises(LockNotAcquired):  # someone else's would be
            Lock(NAME, blocking=False).__enter__()
    assert not held()


def test_release_on_commit_hands_over_an_acquired_hold() -> None:
    lock = Lock(NAME, auto_renew=True)
    with transaction.atomic():
        lock.acquire()
        release_on_commit(lock)
        assert held()
    assert not held()
    with pytest.raises(LockNotOwned):
        release_on_commit(lock)


def test_an_own_release_after_the_hand_over_is_not_reported_at_the_commit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lock = Lock(NAME, auto_renew=True)
    with caplog.at_level(logging.WARNING, "django_redis_locks"), transaction.atomic():
        lock.acquire()
        release_on_commit(lock)
        lock.release()
        assert not held()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_bad_arguments_are_refused_when_decorating() -> None:
    with pytest.raises(InvalidArgument, match="auto_renew"):
        redis_lock("x", release_on_commit=True, auto_renew=False)
    with pytest.raises(InvalidArgument, match="not an alias of DATABASES"):
        redis_lock("x", release_on_commit=True, database="nowhere")
    with pytest.raises(InvalidArgumentType, match="database"):
        redis_lock("x", release_on_commit=True, database=3)  # type: ignore[call-overload]
    with pytest.raises(InvalidArgument, match="needs release_on_commit=True"):
        redis_lock("x", database="other")
    with pytest.raises(InvalidArgumentType, match="release_on_commit"):
        redis_lock("x", release_on_commit="yes")  # type: ignore[call-overload]

    async def view() -> None:
        pass

    with pytest.raises(InvalidArgument, match="sync function"):
        redis_lock("x", release_on_commit=True)(view)
    with pytest.raises(InvalidArgument, match="auto_renew"):
        release_on_commit(Lock(NAME), database="default")
    with (
        pytest.raises(InvalidArgument, match="not an alias"),
        hold_until_commit(Lock(NAME, auto_renew=True), database="nowhere"),
    ):
        pass


@pytest.mark.django_db(databases=["default", "other"])  # a TestCase's transaction
def test_in_a_test_case_captured_commit_callbacks_release_the_hold(
    django_capture_on_commit_callbacks: Any,
) -> None:
    """docs/testing.md: a TestCase never commits; capturing its commit callbacks with
    ``execute=True`` releases the hold at the block's end, as a commit would."""
    with django_capture_on_commit_callbacks(execute=True):
        update(7)
        assert held()
    assert not held()


@redis_lock("invoice:{pk}", release_on_commit=True)
def evicted_update(pk: int) -> None:
    info = get_lock(f"invoice:{pk}")
    assert info is not None
    assert force_release(f"invoice:{pk}", info.holder_id, by="an operator")


def test_outside_a_transaction_a_lost_hold_raises_as_without_the_option() -> None:
    with pytest.raises(LockLost):
        evicted_update(7)


def test_with_autocommit_off_outside_atomic_the_call_is_refused_before_it_runs() -> None:
    """Manual transaction management: Django cannot tell when the transaction commits, so a
    hold released on commit is refused before the lock is taken or the function run (an
    outside review saw the function run, its result dropped and on_commit's error raised)."""
    ran: list[int] = []

    @redis_lock("invoice:{pk}", release_on_commit=True)
    def counted(pk: int) -> None:
        ran.append(pk)

    transaction.set_autocommit(False)
    try:
        with pytest.raises(TransactionManagementError, match=r"needs transaction\.atomic"):
            counted(7)
        with (
            pytest.raises(TransactionManagementError, match=r"needs transaction\.atomic"),
            hold_until_commit(Lock(NAME, auto_renew=True)),
        ):
            ran.append(0)
        lock = Lock(NAME, auto_renew=True)
        lock.acquire()
        with pytest.raises(TransactionManagementError, match=r"needs transaction\.atomic"):
            release_on_commit(lock)
        assert held(), "release_on_commit refused: the hold is left to its owner"
        lock.release()
    finally:
        transaction.rollback()
        transaction.set_autocommit(True)
    assert ran == []
    assert not held()


def test_a_commit_whose_earlier_callback_raised_leaves_no_hold_for_the_next_transaction() -> None:
    """An outside review: Django skips the commit callbacks after one that raises, the
    release included, and the skipped callback lives as long as the exception's traceback;
    the thread's next transaction then ran under that hold, which a garbage collection
    released in its midst. The next transaction finds the hold no longer waits for its
    commit, releases it and takes its own."""
    kept: list[BaseException] = []

    def failing() -> None:
        raise RuntimeError("mail server down")

    with pytest.raises(RuntimeError) as caught, transaction.atomic():
        transaction.on_commit(failing)
        update(7)
    kept.append(caught.value)  # (the traceback, and the skipped callback, stay alive)
    with transaction.atomic():
        first = get_lock(NAME)
        assert update(7) is True
        second = get_lock(NAME)
        assert first is not None and second is not None
        assert second.holder_id != first.holder_id, "ran under the last transaction's hold"
    assert not held()
    kept.clear()


def test_a_later_call_in_the_transaction_follows_the_redis_error_policy(
    settings: Any, make_server: Any, namespace: str
) -> None:
    """An outside review: with Redis down, the later call of a name the transaction holds
    raised LockBackendError whatever ``on_redis_error`` said; it follows the policy now."""
    server = make_server()
    settings.CACHES = {
        **settings.CACHES,
        "flaky": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": server.url},
    }
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "flaky", "NAMESPACE": namespace}

    @redis_lock("flaky:{pk}", release_on_commit=True, on_redis_error="fail_open")
    def flaky(pk: int) -> int:
        return pk

    with transaction.atomic():
        assert flaky(1) == 1
        server.stop()
        assert flaky(1) == 1  # fails open, as a fresh call would

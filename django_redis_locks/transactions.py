"""Holds that follow the database transaction: a lock taken inside ``transaction.atomic()``
is released when that transaction commits or rolls back, not when the code that took it
returns.

A lock released before its transaction commits lets the next holder read the rows as they
were before the first holder's writes, and write over them (a lost update): under PostgreSQL's
default READ COMMITTED, the first holder's writes are invisible to others until the commit.
Holding the lock until the commit closes that window::

    with transaction.atomic():
        with hold_until_commit(Lock(f"invoice:{pk}", auto_renew=True)):
            invoice = Invoice.objects.get(pk=pk)
            invoice.total += amount
            invoice.save()
        ...  # more work in the same transaction: the lock is still held
    # released here, once the commit is done

``@redis_lock(..., release_on_commit=True)`` does the same for a decorated function.

How the hold follows the transaction (on the connection of ``database``, default
``"default"``):

- it is handed to the transaction with ``transaction.on_commit``, so it is released just
  after the outermost ``atomic()`` block commits, after the callbacks registered before it
  (a task enqueued on commit is enqueued before the lock is given back);
- a rollback, of the outermost block or of a savepoint the hold was handed over in (an inner
  ``atomic()`` left by an exception), and a connection closed inside its transaction, make
  Django drop its commit callbacks: the hold's callback is then freed, and releases the hold
  as it goes (a :func:`weakref.finalize`; CPython frees it at once, nothing else refers to
  it). Savepoints that are released (an inner block left normally) keep it: their writes
  are committed only with the outermost block;
- outside any ``atomic()`` block (autocommit) there is nothing to wait for: the hold is
  released as it would be without this (``on_commit`` would run its callback at once); with
  autocommit off (manual transaction management), ``on_commit`` refuses, and so does this:
  the hold is released and Django's TransactionManagementError raised;
- while it waits, the hold is renewed, as long as the thread that took it lives: its lock
  must be made with ``auto_renew=True``;
- in the same transaction, a later ``hold_until_commit`` (or decorated call) of the same
  name runs under the hold that waits for the commit, once Redis confirms it is still held:
  a transaction never waits for itself. (A plain ``lock.acquire()`` of that name would.)

``atomic()`` is synchronous, and so is this module: a transaction's hold is taken and handed
over in the thread that runs the transaction. A hold lost before the commit (force-released
by an operator, or expired while Redis could not be reached) is logged at ERROR when the
transaction ends: the transaction went on without mutual exclusion for a while.
"""

from __future__ import annotations

import logging
import sys
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.transaction import TransactionManagementError

from django_redis_locks.core.errors import (
    InvalidArgument,
    InvalidArgumentType,
    LockLost,
)
from django_redis_locks.core.lock import Lock
from django_redis_locks.core.runtime.driver import drive
from django_redis_locks.core.runtime.ownership import current_owner

from .kept import HeldAs, KeptHold, held_as

__all__ = ["hold_until_commit", "release_on_commit"]

logger = logging.getLogger("django_redis_locks.transactions")

#: The attribute of a database connection (one per thread) that lists the holds waiting for
#: the end of its transaction: {(cache alias, lock name): pending hold}.
_PENDING = "_django_redis_locks_pending"


class PendingHold:
    """One hold waiting for the end of its transaction, released once: at the commit, or
    when its commit callback is dropped (a rollback)."""

    def __init__(self, kept: KeptHold, pending: dict[HeldAs, PendingHold]) -> None:
        self.kept = kept
        self._pending = pending  # the connection's list, left on release
        #: The commit callback (weakly: its being freed is what releases a rolled-back hold).
        self.callback: weakref.ReferenceType[Callable[[], None]] | None = None

    def waiting(self, connection: BaseDatabaseWrapper) -> bool:
        """Whether the transaction that ``connection`` runs now still waits to run this
        hold's commit callback. Not when that transaction ended without running it: a
        commit whose earlier ``on_commit`` callback raised skips the later ones (Django), and
        a rollback drops them, which releases the hold only once the callback is freed (at
        once, unless an exception's traceback keeps it). Such a hold is released now."""
        callback = self.callback() if self.callback is not None else None
        if callback is not None and any(e[1] is callback for e in connection.run_on_commit):
            return True
        self.rolled_back()
        return False

    def alive(self) -> bool:
        """Whether Redis still has the hold (one round trip). One that ended (lost, or
        released by its owner's own call) leaves the list. Raises LockBackendError if Redis
        cannot tell."""
        if not self.kept.hold.active:
            self._leave()
            return False
        try:
            drive(self.kept.lock._ensure(self.kept.hold), self.kept.hold.backend)
        except LockLost as error:
            self._leave()
            logger.error(
                "lost: lock %r, kept for its transaction's commit, was lost before it: %s",
                self.kept.lock.name,
                error,
            )
            return False
        return True

    def committed(self) -> None:
        self._leave()
        if self._released_already():
            return
        try:
            self.kept.release(at_end=True)
        except LockLost as error:
            logger.error(
                "lost: lock %r was lost before its transaction committed, which went on "
                "without mutual exclusion for a while: %s",
                self.kept.lock.name,
                error,
            )
        except Exception:  # never into the commit's caller: the transaction is done
            logger.exception("release: lock %r at its transaction's commit", self.kept.lock.name)

    def rolled_back(self) -> None:
        self._leave()
        if self._released_already():
            return
        try:
            self.kept.release()
        except Exception:  # (a finalizer: nothing may escape it)
            logger.exception("release: lock %r at its transaction's rollback", self.kept.lock.name)

    def _released_already(self) -> bool:
        """Its owner released it with a call of its own (which it was told not to do)."""
        return not self.kept.hold.active and not self.kept.hold.lost

    def _leave(self) -> None:
        if self._pending.get(self.kept.held_as) is self:
            del self._pending[self.kept.held_as]


def _pending_list(database: str) -> dict[HeldAs, PendingHold]:
    connection = connections[database]
    pending: dict[HeldAs, PendingHold] | None = getattr(connection, _PENDING, None)
    if pending is None:
        pending = {}
        setattr(connection, _PENDING, pending)
    return pending


def check_database(database: Any, *, known: bool = True) -> str:
    """``database`` as an alias of ``DATABASES`` (None: ``"default"``); with ``known``
    False (settings not loaded yet), its type only."""
    if database is None:
        return DEFAULT_DB_ALIAS
    if not isinstance(database, str):
        raise InvalidArgumentType(
            "database", f"must be a DATABASES alias (str) or None, not {type(database).__name__}"
        )
    if known and database not in connections.settings:
        raise InvalidArgument("database", f"{database!r} is not an alias of DATABASES")
    return database


def check_renewed(auto_renew: bool, what: str) -> None:
    """A hold kept until the commit must be renewed while it waits."""
    if not auto_renew:
        raise InvalidArgument(
            what,
            "must be auto-renewed (auto_renew=True) to be released on commit: the hold "
            "waits for the transaction's end, however long it takes",
        )


def waiting_hold(using: str | None, name: str, database: str) -> PendingHold | None:
    """The hold of ``name`` (on the cache alias ``using``) that this thread's transaction on
    ``database`` keeps for its commit, if Redis still has it; else None."""
    connection = connections[database]
    if not connection.in_atomic_block:
        return None
    pending = _pending_list(database).get(held_as(using, name))
    if pending is None or not pending.waiting(connection):
        return None
    return pending if pending.alive() else None


def in_transaction(database: str) -> bool:
    """Whether this thread's connection to ``database`` runs an ``atomic()`` block, whose
    end a hold should wait for; otherwise a hold is released as usual. Raises
    TransactionManagementError with autocommit off outside ``atomic()`` (manual transaction
    management), where Django cannot tell when the transaction commits."""
    connection = connections[database]
    if connection.in_atomic_block:
        return True
    if not connection.get_autocommit():
        raise TransactionManagementError(
            f"a hold released on commit needs transaction.atomic() on {database!r}: with "
            "autocommit off, Django cannot tell when the transaction commits"
        )
    return False


def hand_over(kept: KeptHold, database: str) -> None:
    """Release ``kept`` when the transaction of ``database`` in this thread ends (the caller
    checked :func:`in_transaction`). Raises what ``on_commit`` raises, after releasing the
    hold."""
    pending_list = _pending_list(database)
    pending = PendingHold(kept, pending_list)

    def release_on_commit() -> None:
        pending.committed()

    finalizer = weakref.finalize(release_on_commit, pending.rolled_back)
    finalizer.atexit = False  # (at exit the renewal stops: the hold runs out by its TTL)
    pending.callback = weakref.ref(release_on_commit)
    pending_list[kept.held_as] = pending
    try:
        connections[database].on_commit(release_on_commit, robust=True)
    except BaseException:
        pending.rolled_back()
        raise


def release_on_commit(lock: Lock, *, database: str | None = None) -> None:
    """Hand this thread's hold of ``lock`` to the transaction that runs on ``database``
    (default ``"default"``): it is released when the transaction commits or rolls back (see
    the module doc). Do not release it yourself after this. Outside a transaction, it is
    released now, as ``lock.release()`` does (and raises what that raises).

    Raises LockNotOwned if this thread holds nothing, InvalidArgument if ``lock`` is not
    auto-renewed or ``database`` is no alias of ``DATABASES``, TransactionManagementError
    with autocommit off outside ``atomic()`` (the hold left as it is)."""
    database = check_database(database)
    check_renewed(lock.auto_renew, "lock")
    hold = lock._require_hold(current_owner())
    if not in_transaction(database):
        lock.release()
        return
    kept = KeptHold(
        lock, hold, f"the end of its transaction on {database!r}", held_as(lock.using, lock.name)
    )
    hand_over(kept, database)


@contextmanager
def hold_until_commit(lock: Lock, *, database: str | None = None) -> Iterator[Lock]:
    """Take ``lock`` (as ``with lock:`` does: LockNotAcquired if it cannot be had) and, when
    the block ends, normally or by an exception, hand the hold to the transaction on
    ``database`` instead of releasing it (see :func:`release_on_commit`). In a transaction
    that keeps a hold of this name for its commit already, the block runs under that hold.

    Raises InvalidArgument if ``lock`` is not auto-renewed or ``database`` is no alias of
    ``DATABASES``, TransactionManagementError with autocommit off outside ``atomic()``
    (before taking anything)."""
    database = check_database(database)
    check_renewed(lock.auto_renew, "lock")
    in_transaction(database)  # (refuses manual transaction management before anything)
    if waiting_hold(lock.using, lock.name, database) is not None:
        yield lock
        return
    lock.__enter__()
    try:
        yield lock
    except BaseException:
        if not in_transaction(database):
            lock.__exit__(*sys.exc_info())
            raise
        release_on_commit(lock, database=database)
        raise
    release_on_commit(lock, database=database)

"""``SemaphoreCommandMixin``: at most N copies of a management command at once, fleet-wide.

::

    class Command(SemaphoreCommandMixin, BaseCommand):
        semaphore_limit = 2            # at most 2 copies at once, across every host

Each run takes a slot of the fair semaphore ``command:<name>`` before it runs (wrapping
``execute()``, so ``manage.py`` and ``call_command()`` are both covered, whatever ``handle()``
does), keeps it alive with heartbeats while it runs, and gives it back when it ends: normally,
with an exception, or on SIGTERM / SIGINT. A run killed with SIGKILL frees its slot when its
TTL runs out. When all slots are taken, the policy decides: wait for a slot, skip (exit 0)
or fail (exit 1).

The ``--semaphore-*`` options and a run's settings are in :mod:`.options`, taking a slot
under the policy in :mod:`.policy`, and the SIGTERM / SIGINT handling in :mod:`.signals`;
this module is the mixin that puts them together.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from django_redis_locks.core.errors import LockError, LockLost, LockNotOwned
from django_redis_locks.core.semaphore import Semaphore

from .options import (
    POLICIES,
    Policy,
    SemaphoreConfig,
    add_semaphore_options,
    resolve_config,
    shorten_argv,
)
from .policy import acquire_slot, report_no_slot
from .signals import CommandTerminated, SignalGuard

__all__ = ["POLICIES", "CommandTerminated", "SemaphoreCommandMixin"]

logger = logging.getLogger("django_redis_locks.commands")

if TYPE_CHECKING:
    _CommandBase = BaseCommand
else:
    _CommandBase = object


class SemaphoreCommandMixin(_CommandBase):
    """Limit a management command to ``semaphore_limit`` copies at once, fleet-wide.

    Put it before ``BaseCommand``: ``class Command(SemaphoreCommandMixin, BaseCommand)``.

    Class attributes (the first four can be overridden per run by ``--semaphore-limit``,
    ``--semaphore-timeout``, ``--semaphore-policy`` and ``--semaphore-wait``):

    - ``semaphore_limit``: how many copies may run at once (default 1);
    - ``semaphore_timeout``: each run's slot TTL in seconds (default 60). Runs heartbeat, so
      this only bounds how long a run killed with SIGKILL keeps its slot;
    - ``semaphore_policy``: when every slot is taken, ``"wait"`` for one (up to
      ``semaphore_wait`` seconds, None: no limit, then fail), ``"skip"`` (default: exit 0
      with a message on stderr) or ``"fail"`` (CommandError, exit 1);
    - ``semaphore_wait``: longest wait of a ``"wait"`` run, in seconds (None: no limit);
    - ``semaphore_name``: the name after ``command:`` (default: the command's name);
    - ``semaphore_using``: cache alias (default: the configured ``CACHE_ALIAS``);
    - ``semaphore_abort_on_loss``: stop the run with CommandError when its slot is lost
      (default False: report the loss and let it finish).

    While the command runs, ``self.semaphore`` is the :class:`Semaphore` (call
    ``self.semaphore.ensure_held()`` between steps of long work) and ``self.semaphore_lost``
    a ``threading.Event`` set when the heartbeat finds the slot lost.
    """

    semaphore_limit: ClassVar[int] = 1
    semaphore_name: ClassVar[str | None] = None
    semaphore_timeout: ClassVar[float] = 60
    semaphore_policy: ClassVar[Policy] = "skip"
    semaphore_wait: ClassVar[float | None] = None
    semaphore_using: ClassVar[str | None] = None
    semaphore_abort_on_loss: ClassVar[bool] = False

    semaphore: Semaphore | None = None
    semaphore_lost: threading.Event
    semaphore_lost_reason: str | None = None
    semaphore_holder_id: str | None = None

    _semaphore_released: bool | None = None  # None: not given back yet
    _semaphore_abort_on_loss = False
    _semaphore_command: str | None = None
    _semaphore_argv: list[str] | None = None
    _semaphore_guard: SignalGuard | None = None

    # -- Django hooks -----------------------------------------------------------------------
    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        """The command's parser, with the ``--semaphore-*`` options added."""
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        self._semaphore_command = subcommand
        add_semaphore_options(
            parser,
            policy=self.semaphore_policy,
            limit=self.semaphore_limit,
            timeout=self.semaphore_timeout,
        )
        return parser

    def run_from_argv(self, argv: list[str]) -> None:
        self._semaphore_argv = list(argv)
        super().run_from_argv(argv)

    def execute(self, *args: Any, **options: Any) -> str | None:
        """Take a slot, run the command, give the slot back (also on errors and signals)."""
        self._semaphore_output(options)
        config = self.semaphore_config(options)
        self._semaphore_abort_on_loss = config.abort_on_loss
        label = self.semaphore_label()
        self.semaphore_lost = threading.Event()
        self.semaphore_lost_reason = None
        self.semaphore_holder_id = None
        self._semaphore_released = None
        try:
            semaphore = Semaphore(
                config.name,
                config.limit,
                timeout=config.timeout,
                using=config.using,
                auto_renew=True,
                metadata=self.semaphore_metadata(args, options),
                on_lost=self._semaphore_on_lost,
            )
        except LockError as exc:
            raise CommandError(f"{label}: cannot make its semaphore: {exc}") from exc
        self.semaphore = semaphore
        guard = None
        if threading.current_thread() is threading.main_thread():
            guard = SignalGuard(label)
        self._semaphore_guard = guard
        try:
            if guard is not None:
                guard.install()
            if not self._semaphore_take(semaphore, config, label):
                return None
            try:
                output = super().execute(*args, **options)
            except LockLost as exc:
                if self.semaphore_lost.is_set():
                    raise self._semaphore_lost_error(label) from exc
                raise
            finally:
                self._semaphore_give_back(semaphore, label)
            if config.abort_on_loss and self.semaphore_lost.is_set():
                raise self._semaphore_lost_error(label)
            return output
        except BaseException as exc:
            raised = guard.raised_under(exc) if guard is not None else None
            if raised is None:
                raise
            logger.warning(
                "command: %s: %r was raised over the signal's %s on the way out; "
                "the run ends as the signal says",
                label,
                exc,
                type(raised).__name__,
                exc_info=exc,
            )
            raise raised from None
        finally:
            self._semaphore_finish(semaphore, guard, label)

    # -- overridable --------------------------------------------------------------------
    def semaphore_label(self) -> str:
        """How listings and messages name this command: ``"manage.py <name>"``."""
        return f"manage.py {self._semaphore_command_name()}"

    def semaphore_metadata(
        self, args: tuple[Any, ...], options: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Metadata stored with the slot and shown in listings: ``label`` and ``argv``.

        Override it to leave out arguments that must not be shown (the command line is
        recorded as given, shortened to 32 arguments of 64 characters and 2 KB as JSON).
        """
        argv = self._semaphore_argv
        if argv is None:  # call_command(): no command line of its own
            argv = ["call_command", self._semaphore_command_name(), *map(str, args)]
        else:
            argv = [os.path.basename(argv[0]), *argv[1:]]
        shortened = shorten_argv(argv)
        return {"label": self.semaphore_label(), "argv": shortened}

    def semaphore_config(self, options: Mapping[str, Any]) -> SemaphoreConfig:
        """This run's semaphore settings: the class attributes with the options applied.

        Raises CommandError naming the option (or attribute) for a bad value.
        """
        return resolve_config(
            options,
            name=self.semaphore_name or self._semaphore_command_name(),
            limit=self.semaphore_limit,
            timeout=self.semaphore_timeout,
            policy=self.semaphore_policy,
            wait=self.semaphore_wait,
            using=self.semaphore_using,
            abort_on_loss=self.semaphore_abort_on_loss,
        )

    # -- plumbing -------------------------------------------------------------------------
    def _semaphore_command_name(self) -> str:
        if self._semaphore_command:
            return self._semaphore_command
        # execute() called without a parser: management/commands/<name>.py
        return type(self).__module__.rpartition(".")[2]

    def _semaphore_output(self, options: Mapping[str, Any]) -> None:
        # BaseCommand.execute() does this too, but a run that is skipped never gets there.
        if options.get("stdout"):
            self.stdout = OutputWrapper(options["stdout"])
        if options.get("stderr"):
            self.stderr = OutputWrapper(options["stderr"])

    def _semaphore_take(self, semaphore: Semaphore, config: SemaphoreConfig, label: str) -> bool:
        """Take a slot; False (after saying so) when a "skip" run finds none."""
        if not acquire_slot(semaphore, config, label):
            report_no_slot(config, label, self.stderr)  # raises unless the policy is "skip"
            return False
        self.semaphore_holder_id = semaphore.holder_id
        logger.info(
            "command: %s runs in a slot of %r (limit %d, holder %s)",
            label,
            config.name,
            config.limit,
            semaphore.holder_id,
        )
        return True

    def _semaphore_finish(
        self, semaphore: Semaphore, guard: SignalGuard | None, label: str
    ) -> None:
        """The end of every run: the slot given back, the handlers put back, a signal named."""
        try:
            if self._semaphore_released is None and semaphore.holder_id is not None:
                self._semaphore_give_back(semaphore, label)  # interrupted at the grant
        finally:
            if guard is not None:
                guard.uninstall()
                if guard.received is not None:
                    name = signal.Signals(guard.received).name
                    given_back = "; its slot was given back" if self._semaphore_released else ""
                    self.stderr.write(f"{label}: stopped by {name}{given_back}")

    def _semaphore_give_back(self, semaphore: Semaphore, label: str) -> None:
        """Release the slot; never raises (a signal held meanwhile is raised afterwards)."""
        guard = self._semaphore_guard
        if guard is not None:
            guard.deferring = True
        self._semaphore_released = False
        try:
            semaphore.release()
        except LockNotOwned:
            pass  # lost (LockLost, reported by _semaphore_on_lost), or never taken
        except LockError as exc:
            logger.warning(
                "command: %s could not give back its slot (holder %s); it expires by its TTL: %s",
                label,
                self.semaphore_holder_id,
                exc,
            )
        else:
            self._semaphore_released = True
            logger.info(
                "command: %s gave back its slot (holder %s)", label, self.semaphore_holder_id
            )
        finally:
            if guard is not None:
                guard.deferring = False
        if guard is not None:
            guard.raise_pending()

    def _semaphore_on_lost(self, semaphore: Semaphore, reason: str) -> None:
        """The heartbeat (or a check) found the slot lost: say so, loudly; maybe abort."""
        label = self.semaphore_label()
        self.semaphore_lost_reason = reason
        self.semaphore_lost.set()
        guard = self._semaphore_guard
        if not self._semaphore_abort_on_loss:
            then = "another copy may run at the same time"
        elif guard is not None:
            then = "stopping the run"
        else:  # not the main thread: nothing can interrupt it
            then = "the run fails when it ends"
        logger.error(
            "command: %s LOST its slot of %r (holder %s): %s; %s",
            label,
            semaphore.name,
            self.semaphore_holder_id,
            reason,
            then,
        )
        self.stderr.write(f"{label}: lost its slot of {semaphore.name!r}: {reason}; {then}")
        if guard is not None and self._semaphore_abort_on_loss:
            guard.abort(reason)

    def _semaphore_lost_error(self, label: str) -> CommandError:
        return CommandError(f"{label} lost its slot: {self.semaphore_lost_reason}")

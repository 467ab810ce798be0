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
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeAlias

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from .core.errors import (
    InvalidArgument,
    InvalidArgumentType,
    LockBackendError,
    LockConfigurationError,
    LockError,
    LockLost,
    LockNotOwned,
    SemaphoreLimitMismatch,
)
from .core.semaphore import Semaphore, check_limit
from .core.validation import check_bool, check_name, check_ttl, check_wait

__all__ = ["POLICIES", "CommandTerminated", "SemaphoreCommandMixin"]

logger = logging.getLogger("django_redis_locks.commands")

Policy = Literal["wait", "skip", "fail"]
#: What a run does when every slot is taken.
POLICIES: tuple[Policy, ...] = ("wait", "skip", "fail")
#: Longest argv recorded in a slot's metadata (arguments, and characters per argument).
_MAX_ARGV_ITEMS = 32
_MAX_ARG_CHARS = 64
#: ... and in all, as JSON: half of the slot's 4 KB of metadata (non-ASCII and control
#: characters take up to 12 bytes each there, so the counts above alone do not bound it).
_MAX_ARGV_JSON_BYTES = 2048
#: Name of the core's threads that clean up after an interrupted call (core.driver).
_Handler: TypeAlias = Callable[[int, FrameType | None], Any] | int | None

if TYPE_CHECKING:
    _CommandBase = BaseCommand
else:
    _CommandBase = object


class CommandTerminated(SystemExit):
    """Raised in the main thread by SIGTERM while a semaphore-limited command runs.

    A ``SystemExit`` with code ``128 + signal number`` (143 for SIGTERM): ``finally`` blocks
    run, the slot is given back, and the process exits with the status a shell reports for
    a process ended by SIGTERM.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


@dataclass(frozen=True, slots=True)
class SemaphoreConfig:
    """The semaphore settings of one run: class attributes, overridden by options."""

    name: str
    limit: int
    timeout: float
    policy: Policy
    wait: float | None
    using: str | None
    abort_on_loss: bool


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
    _semaphore_guard: _SignalGuard | None = None

    # -- Django hooks -----------------------------------------------------------------------
    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        """The command's parser, with the ``--semaphore-*`` options added."""
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        self._semaphore_command = subcommand
        group = parser.add_argument_group(
            "semaphore", "at most --semaphore-limit copies of this command run at once"
        )
        group.add_argument(
            "--semaphore-wait",
            type=float,
            default=None,
            metavar="SECONDS",
            help="Wait up to SECONDS for a free slot (implies --semaphore-policy wait).",
        )
        group.add_argument(
            "--semaphore-policy",
            choices=POLICIES,
            default=None,
            help=(
                f"When every slot is taken: wait, skip (exit 0) or fail (exit 1). "
                f"Default: {self.semaphore_policy}."
            ),
        )
        group.add_argument(
            "--semaphore-limit",
            type=int,
            default=None,
            metavar="N",
            help=f"How many copies may run at once. Default: {self.semaphore_limit}.",
        )
        group.add_argument(
            "--semaphore-timeout",
            type=float,
            default=None,
            metavar="SECONDS",
            help=(
                "TTL of this run's slot; it is renewed while the run lives, so this is how "
                f"long a killed run blocks its slot. Default: {self.semaphore_timeout:g}."
            ),
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
            guard = _SignalGuard(label)
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
        finally:
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
        shortened = [
            arg if len(arg) <= _MAX_ARG_CHARS else arg[: _MAX_ARG_CHARS - 3] + "..."
            for arg in argv[:_MAX_ARGV_ITEMS]
        ]
        while shortened and len(json.dumps(shortened)) > _MAX_ARGV_JSON_BYTES:
            shortened.pop()
        if len(argv) > len(shortened):
            shortened.append(f"... ({len(argv) - len(shortened)} more)")
        return {"label": self.semaphore_label(), "argv": shortened}

    def semaphore_config(self, options: Mapping[str, Any]) -> SemaphoreConfig:
        """This run's semaphore settings: the class attributes with the options applied.

        Raises CommandError naming the option (or attribute) for a bad value.
        """
        wait_option = options.get("semaphore_wait")
        policy_option = options.get("semaphore_policy")
        policy = policy_option if policy_option is not None else self.semaphore_policy
        if wait_option is not None:
            if policy_option is not None and policy_option != "wait":
                raise CommandError(
                    f"--semaphore-wait makes a run wait for a slot; it cannot be combined "
                    f"with --semaphore-policy {policy_option}"
                )
            policy = "wait"
        if policy not in POLICIES:
            source = "--semaphore-policy" if policy_option is not None else "semaphore_policy"
            raise CommandError(f"{source} must be one of {', '.join(POLICIES)} (got {policy!r})")
        name = self.semaphore_name or self._semaphore_command_name()
        return SemaphoreConfig(
            name=_option("semaphore_name", check_name, f"command:{name}"),
            limit=_resolve(
                options, "--semaphore-limit", check_limit, self.semaphore_limit, kind=int
            ),
            timeout=_resolve(options, "--semaphore-timeout", check_ttl, self.semaphore_timeout),
            policy=policy,
            wait=_resolve(options, "--semaphore-wait", check_wait, self.semaphore_wait),
            using=_option("semaphore_using", _check_using, self.semaphore_using),
            abort_on_loss=_option(
                "semaphore_abort_on_loss",
                lambda value: check_bool(value, "semaphore_abort_on_loss"),
                self.semaphore_abort_on_loss,
            ),
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
        waiting = config.policy == "wait"
        try:
            if waiting:
                acquired = semaphore.acquire(blocking=True, timeout=config.wait)
            else:
                acquired = semaphore.acquire(blocking=False)
        except SemaphoreLimitMismatch as exc:
            raise CommandError(
                f"{label}: {config.name!r} is in use with limit {exc.stored_limit} by runs "
                f"that are still going; this run asks for {exc.limit}. Every copy must use "
                f"the same limit: pass --semaphore-limit {exc.stored_limit}, or wait until "
                "those runs ended (the new limit then takes over)"
            ) from exc
        except (LockBackendError, LockConfigurationError) as exc:
            raise CommandError(f"{label}: cannot take a slot of {config.name!r}: {exc}") from exc
        if acquired:
            self.semaphore_holder_id = semaphore.holder_id
            logger.info(
                "command: %s runs in a slot of %r (limit %d, holder %s)",
                label,
                config.name,
                config.limit,
                semaphore.holder_id,
            )
            return True
        busy = self._semaphore_busy(semaphore, config)
        if waiting:
            raise CommandError(
                f"{label}: waited {config.wait:g} s for a slot of {config.name!r}, but {busy}"
            )
        if config.policy == "fail":
            raise CommandError(f"{label}: not running: {busy}")
        logger.info("command: %s skipped: %s", label, busy)
        self.stderr.write(f"{label}: skipped: {busy}")
        return False

    def _semaphore_busy(self, semaphore: Semaphore, config: SemaphoreConfig) -> str:
        """Why no slot was free: "2 copies already running (limit 2)"."""
        from .inspect import get_semaphore

        try:
            info = get_semaphore(config.name, using=config.using)
        except LockError:
            return f"all {config.limit} slots are taken"
        running = 0 if info is None else info.count
        waiting = 0 if info is None else info.waiting
        text = f"{running} {'copy' if running == 1 else 'copies'} already running"
        if waiting:
            text += f" and {waiting} {'waits' if waiting == 1 else 'wait'}"
        return f"{text} (limit {config.limit})"

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


class _SignalGuard:
    """SIGTERM and SIGINT handlers for the main thread while a command runs.

    SIGTERM raises :class:`CommandTerminated`, SIGINT ``KeyboardInterrupt``, in the main
    thread, so that ``finally`` gives the slot back. While the slot is being given back a
    signal is held and raised afterwards, so a second Ctrl-C cannot cut the release short.
    A lost slot (with ``abort_on_loss``) is delivered as a SIGTERM to the main thread, which
    interrupts a blocking call, and becomes CommandError there.
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self.deferring = False
        self.received: int | None = None
        self._pending: int | None = None
        self._previous: dict[int, _Handler] = {}
        self._abort_reason: str | None = None
        self._abort_delivered = False
        self._installed = False
        self._mutex = threading.Lock()
        self._main = threading.main_thread().ident

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN:
                continue  # the process was told to ignore it; keep it that way
            self._previous[signum] = previous
            signal.signal(signum, self._handle)
        with self._mutex:
            self._installed = True

    def uninstall(self) -> None:
        with self._mutex:
            self._installed = False
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # (runs a pending handler first)

    def abort(self, reason: str) -> None:
        """From another thread: interrupt the main thread with the loss."""
        if threading.get_ident() == self._main:
            return  # found by ensure_held() or release() there, which raise LockLost
        with self._mutex:
            if not self._installed or self._abort_reason is not None:
                return
            self._abort_reason = reason
            if signal.SIGTERM in self._previous and self._main is not None:
                signal.pthread_kill(self._main, signal.SIGTERM)

    def raise_pending(self) -> None:
        signum, self._pending = self._pending, None
        if signum is not None:
            self._raise(signum, after_release=True)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.deferring:
            if self._pending is None or self._pending_is_abort():
                self._pending = signum  # a real signal wins over the loss
            return
        self._raise(signum, after_release=False)

    def _pending_is_abort(self) -> bool:
        return self._pending == signal.SIGTERM and self._is_abort(signal.SIGTERM)

    def _is_abort(self, signum: int) -> bool:
        return (
            signum == signal.SIGTERM
            and self._abort_reason is not None
            and not self._abort_delivered
        )

    def _raise(self, signum: int, *, after_release: bool) -> None:
        if self._is_abort(signum):
            self._abort_delivered = True
            if after_release:
                return  # the run is over; execute() reports the loss
            raise CommandError(f"{self.label} lost its slot: {self._abort_reason}")
        self.received = signum
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise CommandTerminated(signum)


def _resolve(
    options: Mapping[str, Any],
    option: str,
    check: Callable[[Any], Any],
    default: Any,
    *,
    kind: type = float,
) -> Any:
    """An option's value (converting text from call_command), else the class attribute's."""
    key = option.lstrip("-").replace("-", "_")
    value = options.get(key)
    source = option
    if value is None:
        value, source = default, key
    elif isinstance(value, str):
        try:
            value = kind(value)
        except ValueError:
            raise CommandError(f"{option} must be a number (got {value!r})") from None
    try:
        return check(value)
    except (InvalidArgument, InvalidArgumentType) as exc:
        raise CommandError(f"{source} {str(exc).partition(': ')[2]}") from None


def _option(attribute: str, check: Callable[[Any], Any], value: Any) -> Any:
    try:
        return check(value)
    except (InvalidArgument, InvalidArgumentType) as exc:
        raise CommandError(f"{attribute} {str(exc).partition(': ')[2]}") from None


def _check_using(value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidArgumentType("using", f"must be a cache alias or None, not {value!r}")
    return value

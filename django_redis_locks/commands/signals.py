"""SIGTERM and SIGINT while a semaphore-limited management command runs.

:class:`CommandTerminated` is what SIGTERM raises in the main thread; ``SignalGuard``
installs the handlers for the length of a run, holds a signal while the slot is being given
back, and interrupts the main thread when the slot is lost and the run must stop.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeAlias

from django.core.management.base import CommandError

__all__ = ["CommandTerminated", "SignalGuard"]

#: A signal handler as ``signal.getsignal()`` returns it.
_Handler: TypeAlias = Callable[[int, FrameType | None], Any] | int | None


class CommandTerminated(SystemExit):
    """Raised in the main thread by SIGTERM while a semaphore-limited command runs.

    A ``SystemExit`` with code ``128 + signal number`` (143 for SIGTERM): ``finally`` blocks
    run, the slot is given back, and the process exits with the status a shell reports for
    a process ended by SIGTERM.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


class SignalGuard:
    """SIGTERM and SIGINT handlers for the main thread while a command runs.

    SIGTERM raises :class:`CommandTerminated`, SIGINT ``KeyboardInterrupt``, in the main
    thread, so that ``finally`` gives the slot back. While the slot is being given back a
    signal is held and raised afterwards, so a second Ctrl-C cannot cut the release short.
    A lost slot (with ``abort_on_loss``) is delivered as a SIGTERM to the main thread, which
    interrupts a blocking call, and becomes CommandError there.

    ``raised`` is the exception a handler raised. Code it interrupts may raise another one
    over it on the way out (Python 3.13's ``threading.Condition.wait()`` can, cpython#118433);
    :meth:`raised_under` finds the handler's exception under such a one, so that the signal,
    not the accident, decides how the run ends.
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self.deferring = False
        self.received: int | None = None
        self.raised: BaseException | None = None
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

    def raised_under(self, exc: BaseException) -> BaseException | None:
        """This guard's exception when ``exc`` is another one raised while it propagated."""
        raised = self.raised
        if raised is None or exc is raised:
            return None
        seen: set[int] = set()
        context = exc.__context__
        while context is not None and id(context) not in seen:
            if context is raised:
                return raised
            seen.add(id(context))
            context = context.__context__
        return None

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
            self.raised = CommandError(f"{self.label} lost its slot: {self._abort_reason}")
            raise self.raised
        self.received = signum
        self.raised = KeyboardInterrupt() if signum == signal.SIGINT else CommandTerminated(signum)
        raise self.raised

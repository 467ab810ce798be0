"""``limited`` with ``semaphore_abort_on_loss``: a run that loses its slot stops at once."""

from __future__ import annotations

from tests.testapp.management.commands import limited


class Command(limited.Command):
    semaphore_abort_on_loss = True

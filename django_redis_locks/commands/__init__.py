"""``SemaphoreCommandMixin``, as a package:

- :mod:`.mixin`: the mixin that puts the pieces together around ``execute()``;
- :mod:`.options`: the ``--semaphore-*`` options and the settings of one run;
- :mod:`.policy`: taking a slot under the run's policy, and what happens without one;
- :mod:`.signals`: SIGTERM and SIGINT while a run holds its slot.
"""

from .mixin import POLICIES, CommandTerminated, SemaphoreCommandMixin

__all__ = ["POLICIES", "CommandTerminated", "SemaphoreCommandMixin"]

"""``@redis_lock`` and what one decorated call needs, as a package:

- :mod:`.decorator`: ``redis_lock`` itself, its options and their checks;
- :mod:`.calls`: one call: its lock, and the policies on contention and on Redis errors;
- :mod:`.names`: lock names built from a call's arguments;
- :mod:`.callers`: views and tasks as the decorator meets them (requests, responses on
  contention, tasks run again later, callables refused);
- :mod:`.kept_holds`: a hold kept past the call, for a streamed response or a coroutine
  (and, with ``release_on_commit``, for its transaction: :mod:`django_redis_locks.transactions`);
- :mod:`.nesting`: decorated calls of a name their caller holds are refused.
"""

from .decorator import SKIPPED, redis_lock

__all__ = ["SKIPPED", "redis_lock"]

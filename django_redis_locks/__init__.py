"""Distributed locks and fair counting semaphores on Redis, for Django.

Importing this package never imports Django: the core (``django_redis_locks.core``) works
with any redis-py client, and the Django layer is loaded when a lock is given no client.
"""

from .core import *  # noqa: F403 - the public names are the core's
from .core import __all__ as __all__

__version__ = "0.1.0.dev0"

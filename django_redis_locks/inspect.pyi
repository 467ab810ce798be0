# The old import path of :mod:`django_redis_locks.inspection`, for type checkers: at run time
# the package's ``__init__`` makes ``django_redis_locks.inspect`` that very module (a module
# file of that name would shadow the standard library's ``inspect``).
from .inspection import *  # noqa: F403
from .inspection import __all__ as __all__

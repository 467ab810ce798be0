"""Unique tasks: a Django task with given arguments queued or running once at most, its name
taken at enqueue and handed to the worker that runs it (see :func:`unique_task`)."""

from .decorator import DEFAULT_QUEUED_TIMEOUT, unique_task
from .django_tasks import Existing

__all__ = ["DEFAULT_QUEUED_TIMEOUT", "Existing", "unique_task"]

"""Views and tasks as ``@redis_lock`` meets them: the request among a call's arguments (and
its user, loaded the async way), the responses a view gets on contention or a Redis failure,
a task run again later, and the callables the decorator refuses.
"""

from __future__ import annotations

import inspect
import logging
import math
import sys
from datetime import timedelta
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.utils.functional import SimpleLazyObject, empty

from django_redis_locks.conf import get_config
from django_redis_locks.core.errors import (
    InvalidArgumentType,
    LockConfigurationError,
    LockNotAcquired,
)

__all__ = [
    "instance_of_loaded",
    "is_django_task",
    "label_of",
    "load_user",
    "prefers_json",
    "refuse_generators",
    "refuse_retry_outside_tasks",
    "refuse_task_objects",
    "request_of",
    "response",
    "retry_after_seconds",
    "retry_later",
    "task_fields",
]

logger = logging.getLogger("django_redis_locks.decorators")


def retry_later(
    error: LockNotAcquired,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    name: str,
    label: str,
    skip_result: Any,
    retry_after: int,
) -> Any:
    """Run the task again in ``retry_after`` seconds: Celery's ``retry()`` (it raises),
    or a Django task enqueued again (then this run returns ``skip_result``)."""
    django_task = _django_task(args)
    if django_task is not None:  # a Django task with takes_context=True
        run_after = timezone.now() + timedelta(seconds=retry_after)
        django_task.using(run_after=run_after).enqueue(*args[1:], **kwargs)
        logger.info(
            "acquire: lock %r for %s is taken: enqueued again to run in %s s",
            name,
            label,
            retry_after,
        )
        return skip_result
    celery_task = current_celery_task(args)
    if celery_task is not None:
        raise celery_task.retry(countdown=retry_after, exc=error)
    raise _not_a_task(label) from error


def refuse_retry_outside_tasks(args: tuple[Any, ...], label: str) -> None:
    """``on_contention="retry"`` needs a task to run again: refuse a call that is not one at
    once, contended or not (the decorator cannot know it: a task decorator goes above it).
    A view answers contention with its status whatever the policy: not refused."""
    if request_of(args) is not None:
        return
    if _django_task(args) is None and current_celery_task(args) is None:
        raise _not_a_task(label)


def _not_a_task(label: str) -> LockConfigurationError:
    return LockConfigurationError(
        f"{label}: on_contention='retry' runs a task again later, but this call is "
        "neither a Celery task nor a Django task with takes_context=True; use "
        "on_contention='skip' or 'raise' for a plain function"
    )


def task_fields(args: tuple[Any, ...]) -> dict[str, str]:
    """What holder metadata says of the task this call runs in: a Django task's name and id
    (``takes_context=True``: its context comes first), or a Celery task's; empty outside
    both."""
    django_task = _django_task(args)
    if django_task is not None:
        return {
            "django_task": str(getattr(django_task, "module_path", django_task.name)),
            "django_task_id": str(args[0].task_result.id),
        }
    celery_task = current_celery_task(args)
    if celery_task is not None:
        return {"celery_task": str(celery_task.name), "celery_task_id": str(celery_task.request.id)}
    return {}


def _django_task(args: tuple[Any, ...]) -> Any:
    """The Django task this call runs (its context comes first), or None."""
    context = args[0] if args else None
    return getattr(getattr(context, "task_result", None), "task", None)


def retry_after_seconds(error: LockNotAcquired, fixed: float | None = None) -> int:
    """Whole seconds a contended call asks to wait (``Retry-After``, a retry's countdown), at
    least 1: ``fixed`` (the decorator's ``retry_after``) when given, else the lock's estimate
    (``error.retry_after``; 1 s when unknown), at most the ``RETRY_AFTER_MAX`` setting."""
    if fixed is not None:
        return max(1, math.ceil(fixed))
    estimate = 1.0 if error.retry_after is None else error.retry_after
    return max(1, min(math.ceil(estimate), get_config().retry_after_max))


def current_celery_task(args: tuple[Any, ...]) -> Any:
    """The Celery task this call runs in (a bound task's ``self``, or Celery's current
    task), or None outside a Celery worker."""
    celery_task_module = sys.modules.get("celery.app.task")
    task_class = getattr(celery_task_module, "Task", None)
    if task_class is None:
        return None
    if args and isinstance(args[0], task_class) and args[0].request.id:
        return args[0]
    from celery import current_task  # a proxy: false when no task runs

    if current_task and current_task.request.id:
        return current_task
    return None


async def load_user(request: HttpRequest | None) -> None:
    """Load ``request.user`` the async way (``request.auser()``) if it is still lazy, so that
    naming the lock from it does not run a database query inside the event loop."""
    user = getattr(request, "user", None)
    if request is None or not isinstance(user, SimpleLazyObject):
        return
    if user._wrapped is not empty:
        return
    auser = getattr(request, "auser", None)
    if auser is not None:
        request.user = await auser()


def response(
    request: HttpRequest, status: int, error: str, text: str, *, retry_after: int
) -> HttpResponse:
    """A view's answer when it did not run: ``text`` as plain text, or as JSON
    (``{"error": error, "detail": text, "retry_after": seconds}``) when the request prefers
    JSON; with ``Retry-After`` either way."""
    headers = {"Retry-After": str(retry_after)}
    if prefers_json(request):
        body = {"error": error, "detail": text, "retry_after": retry_after}
        return JsonResponse(body, status=status, headers=headers)
    return HttpResponse(
        text, status=status, content_type="text/plain; charset=utf-8", headers=headers
    )


def prefers_json(request: HttpRequest) -> bool:
    """Whether the request's ``Accept`` names a JSON type (``application/json``, ``...+json``)
    at least as wanted as plain text and HTML (a browser's ``*/*`` does not count)."""
    best_json = best_text = 0.0
    for media_range in request.headers.get("Accept", "").split(","):
        media_type, _, params = media_range.strip().partition(";")
        media_type = media_type.strip().lower()
        quality = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if media_type == "application/json" or media_type.endswith("+json"):
            best_json = max(best_json, quality)
        elif media_type in ("text/html", "text/plain", "text/*"):
            best_text = max(best_text, quality)
    return best_json > 0 and best_json >= best_text


def request_of(args: tuple[Any, ...]) -> HttpRequest | None:
    """The HttpRequest among a call's first arguments (a view call), else None."""
    for value in args[:2]:
        if isinstance(value, HttpRequest):
            return value
        inner = getattr(value, "_request", None)  # Django REST framework's Request
        if isinstance(inner, HttpRequest):
            return inner
    return None


def label_of(func: Any) -> str:
    module = getattr(func, "__module__", None) or "?"
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    return f"{module}.{name}"


def refuse_generators(func: Any) -> None:
    """A generator function returns at once: the lock would be released before its body
    runs. Refused, with the way to do it."""
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        raise InvalidArgumentType(
            "func",
            f"@redis_lock cannot guard the generator function {label_of(func)}: calling it "
            "returns a generator at once, before its body runs, so the lock would be released "
            "before the work. Take the lock inside it instead:\n\n"
            '    def items(...):\n        with Lock("name"):\n            yield ...',
        )


def refuse_task_objects(func: Any) -> None:
    """Task objects run their function elsewhere: the lock must wrap the function itself."""
    # A Celery app that is not finalized yet (a web process) makes ``@shared_task`` return a
    # proxy of the task to come, which makes the task (and may finalize the app) when its
    # class or repr is asked for: recognised by its type alone.
    celery_local = sys.modules.get("celery.local")
    proxy_class = getattr(celery_local, "Proxy", None) if celery_local is not None else None
    if isinstance(proxy_class, type) and issubclass(type(func), proxy_class):
        _refuse_task("@shared_task / @app.task", "a Celery task proxy")
    if is_django_task(func):
        _refuse_task("@task", repr(func))
    if instance_of_loaded(func, "celery.app.task"):
        _refuse_task("@shared_task / @app.task", repr(func))


def is_django_task(obj: Any) -> bool:
    """Whether ``obj`` is a task of Django's task framework (``django.tasks`` from Django
    6.0, the django-tasks backport before)."""
    return instance_of_loaded(obj, "django.tasks.base") or instance_of_loaded(
        obj, "django_tasks.base"
    )


def instance_of_loaded(obj: Any, module: str, attribute: str = "Task") -> bool:
    """Whether ``obj`` is an instance of ``module.attribute``, if that module is loaded at
    all (never imported here: an object of it exists only once it is)."""
    loaded = sys.modules.get(module)
    found = getattr(loaded, attribute, None) if loaded is not None else None
    return isinstance(found, type) and isinstance(obj, found)


def _refuse_task(decorator: str, shown: str) -> None:
    raise InvalidArgumentType(
        "func",
        f"@redis_lock was given a task object ({shown}); put {decorator} above "
        f"@redis_lock so the lock wraps the task's function:\n\n"
        f"    {decorator.split(' ', maxsplit=1)[0]}\n"
        "    @redis_lock(...)\n    def my_task(...): ...",
    )

"""@redis_lock as Django developers use it: keys from the user in async views, every key form
of the reference on sync and async views, generators, long names, Retry-After, tasks that
retry later, and skipped runs that can be told from successful ones."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from celery.exceptions import Retry
from django.contrib.auth.models import User
from django.http import HttpRequest, StreamingHttpResponse
from django.test import AsyncClient, Client, RequestFactory
from django.utils import timezone

from django_redis_locks import (
    SKIPPED,
    InvalidArgument,
    InvalidArgumentType,
    Lock,
    LockAlreadyHeld,
    LockConfigurationError,
    LockLost,
    LockNotAcquired,
    Semaphore,
    redis_lock,
)
from django_redis_locks.core.validation import MAX_NAME_BYTES
from django_redis_locks.decorators.names import bounded_name
from django_redis_locks.inspection import get_lock, list_locks
from tests.django import decorated_tasks, decorated_views
from tests.django.decorated_tasks import TaskContext

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _namespace(settings: Any, namespace: str) -> Iterator[None]:
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    decorated_views.probe.names.clear()
    decorated_tasks.runs.clear()
    yield
    decorated_views.probe.names.clear()
    decorated_tasks.runs.clear()


# -- item 3: keys from the user in async views ------------------------------------------------
@pytest.mark.urls("tests.django.decorated_views")
def test_an_async_view_keyed_by_the_user_runs_under_that_users_lock() -> None:
    """The reference's example: ``@redis_lock("report:{request.user.pk}")`` on an async
    view. The lazy user used to be loaded inside the event loop: SynchronousOnlyOperation."""
    user = User.objects.create_user("ada", password="pw")

    async def scenario() -> list[int]:
        client = AsyncClient()
        await sync_to_async(client.force_login)(user)
        statuses = [(await client.get("/build-report/")).status_code]
        async with Lock(f"report:{user.pk}", timeout=10):  # blocking=True: it waits...
            late = asyncio.create_task(client.get("/build-report/"))
            await asyncio.sleep(0.3)
            assert not late.done()
        statuses.append((await late).status_code)  # ...and runs once it is free
        return statuses

    assert asyncio.run(scenario()) == [200, 200]
    assert decorated_views.probe.names == [f"report:{user.pk}", f"report:{user.pk}"]


@pytest.mark.urls("tests.django.decorated_views")
@pytest.mark.parametrize(
    ("method", "url", "name"),
    [
        ("get", "/report/", "report:{pk}"),  # sync view, the user's pk
        ("get", "/build-report/", "report:{pk}"),  # async view, the user's pk
        ("get", "/export/", "export:ada"),  # async view, a callable key reading the user
        ("get", "/invoice/7/", "invoice:7"),  # sync view, a URL kwarg
        ("get", "/ainvoice/7/", "invoice:7"),  # async view, a URL kwarg
        ("post", "/invoice-view/7/", "invoice:7"),  # class-based view (method_decorator)
        ("post", "/ainvoice-view/7/", "invoice:7"),  # async class-based view
        ("post", "/user-invoice/7/", "user-invoice:{pk}:7"),  # async CBV, user and kwarg
    ],
)
def test_every_key_form_of_the_reference_works_on_sync_and_async_views(
    method: str, url: str, name: str
) -> None:
    user = User.objects.create_user("ada", password="pw")
    client = Client()
    client.force_login(user)
    response = getattr(client, method)(url)
    assert response.status_code == 200, response.content[:300]
    if "report" in url:  # the sync report view records every report: lock it saw
        assert decorated_views.probe.names[-1].endswith(f"report:{user.pk}")
    else:
        assert decorated_views.probe.names == [name.format(pk=user.pk)]

    async def through_the_async_client() -> int:
        async_client = AsyncClient()
        await sync_to_async(async_client.force_login)(user)
        response = await getattr(async_client, method)(url)
        return int(response.status_code)

    assert asyncio.run(through_the_async_client()) == 200


# -- item 4: decorator edges -----------------------------------------------------------------
def test_generator_functions_are_refused_when_decorated() -> None:
    def numbers() -> Iterator[int]:
        yield 1

    async def anumbers() -> AsyncIterator[int]:
        yield 1

    for function in (numbers, anumbers):
        with pytest.raises(InvalidArgumentType, match="generator function") as info:
            redis_lock("numbers")(function)
        assert "with Lock(" in str(info.value)


def test_a_name_over_256_bytes_is_kept_within_the_limit_deterministically() -> None:
    ran: list[str] = []

    @redis_lock("x" * 250 + ":{a}:{b}")
    def job(a: str, b: str) -> None:
        holds = [get_lock(bounded_name("x" * 250 + f":{a}:{b}"))]
        ran.append(holds[0].name if holds[0] else "")

    job("y" * 60, "z" * 60)
    job("y" * 60, "z" * 61)
    assert len(ran) == 2 and all(ran)
    first, second = ran
    assert first != second  # distinct values: distinct names
    for name in ran:
        assert len(name.encode("utf-8")) <= MAX_NAME_BYTES
        assert name.startswith("x" * 200) and "~" in name
    assert bounded_name("x" * 250 + ":" + "y" * 60 + ":" + "z" * 60) == first  # the same again
    assert bounded_name("short") == "short"
    multibyte = bounded_name("é" * 300)  # cut between characters, never inside one
    assert len(multibyte.encode("utf-8")) <= MAX_NAME_BYTES


# -- item 5: Retry-After worth honouring -------------------------------------------------------
def test_retry_after_estimates_from_recent_holds_not_the_whole_ttl() -> None:
    """A view that holds 100 ms with a 60 s TTL: the estimate comes from how long the last
    holds lasted, bounded by the holder's remaining TTL (it used to be that remaining TTL)."""
    lock = Lock("estimated", timeout=60)
    for _ in range(3):  # three holds of 100 ms each
        assert lock.acquire()
        time.sleep(0.1)
        lock.release()
    assert lock.acquire()
    other = Lock("estimated", timeout=60, blocking=False)
    with pytest.raises(LockNotAcquired) as info:
        other.__enter__()
    lock.release()
    retry_after = info.value.retry_after
    assert retry_after is not None and 0.0 < retry_after <= 0.2, retry_after


@pytest.mark.urls("tests.django.decorated_views")
def test_a_409_says_retry_after_one_second_for_a_short_view_not_the_ttl() -> None:
    lock = Lock("order:9", timeout=60)
    for _ in range(2):
        assert lock.acquire()
        time.sleep(0.05)
        lock.release()
    with Lock("order:9", timeout=60):
        response = Client().get("/charge/9/")
    assert response.status_code == 409
    assert response["Retry-After"] == "1"  # never 0, and not the 60 s TTL


def test_without_history_retry_after_is_as_long_again_as_the_hold_has_run() -> None:
    """No hold of the name has ended yet: the estimate is as long again as the holder has
    held it (at least 1 s), not its remaining TTL, so a caller that retries on it backs off as
    the hold goes on."""
    for primitive in (Lock("fresh-name", timeout=30), Semaphore("fresh-sem", 1, timeout=30)):
        other = type(primitive)(*primitive_args(primitive), blocking=False)
        with primitive:
            with pytest.raises(LockNotAcquired) as info:
                other.__enter__()
            assert info.value.retry_after is not None and 1 <= info.value.retry_after < 1.5
            time.sleep(1.5)  # the hold goes on (time passing is the scenario)
            with pytest.raises(LockNotAcquired) as info:
                other.__enter__()
            assert info.value.retry_after is not None and 1.5 <= info.value.retry_after < 2.5


def primitive_args(primitive: Lock | Semaphore) -> tuple[Any, ...]:
    return (primitive.name,) if isinstance(primitive, Lock) else (primitive.name, 1)


@pytest.mark.urls("tests.django.decorated_views")
def test_the_first_refusal_on_a_new_name_says_retry_after_one_second_not_the_ttl() -> None:
    with Lock("order:10", timeout=60):  # a name no hold has ended on yet
        response = Client().get("/charge/10/")
    assert response.status_code == 409
    assert response["Retry-After"] == "1"  # was 60: the holder's TTL


@pytest.mark.urls("tests.django.decorated_views")
def test_retry_after_fixes_the_wait_a_contended_call_asks_for() -> None:
    with Lock("refund:3", timeout=60):
        response = Client().get("/refund/3/")
    assert response.status_code == 409
    assert response["Retry-After"] == "7"  # @redis_lock(..., retry_after=7)


@pytest.mark.urls("tests.django.decorated_views")
def test_retry_after_max_caps_the_estimate(settings: Any) -> None:
    settings.DJANGO_REDIS_LOCKS = {**settings.DJANGO_REDIS_LOCKS, "RETRY_AFTER_MAX": 1}
    with Lock("order:11", timeout=60):
        time.sleep(2.1)  # estimate: about 2.1 s more (time passing is the scenario)
        capped = Client().get("/charge/11/")
        settings.DJANGO_REDIS_LOCKS = {**settings.DJANGO_REDIS_LOCKS, "RETRY_AFTER_MAX": 60}
        estimated = Client().get("/charge/11/")
    assert capped["Retry-After"] == "1"
    assert estimated["Retry-After"] == "3"


def test_retry_after_is_checked_when_decorating() -> None:
    bad: Any
    for bad in (0, -1, "5"):
        with pytest.raises((ValueError, TypeError)):
            redis_lock("x", retry_after=bad)


# -- item 6: tasks that retry later, skipped runs one can tell apart -----------------------------
def test_a_skipped_run_returns_skip_result_so_it_can_be_told_from_a_run() -> None:
    @redis_lock("nightly", on_contention="skip", skip_result=SKIPPED)
    def nightly() -> None:
        return None

    assert nightly() is None  # it ran
    with Lock("nightly", timeout=10):
        assert nightly() == SKIPPED  # it did not


def test_skip_result_without_a_skipping_policy_is_refused_when_decorating() -> None:
    with pytest.raises(ValueError, match="on_contention='skip' or 'retry'"):
        redis_lock("nightly", skip_result=SKIPPED)  # type: ignore[call-overload]


def test_retry_outside_a_task_says_what_it_needs() -> None:
    @redis_lock("plain", on_contention="retry")
    def plain() -> None: ...

    with Lock("plain", timeout=10), pytest.raises(LockConfigurationError, match="Celery task"):
        plain()


def test_retry_outside_a_task_is_refused_at_every_call_not_only_under_contention() -> None:
    """A plain function with ``on_contention="retry"`` used to run as long as nobody else
    held its name, and fail only the first time someone did: in production, under load. A
    decorator cannot know whether a task decorator will wrap it (``@task`` goes above), so
    the first call, contended or not, says so, without running."""
    ran: list[str] = []

    @redis_lock("plain-free", on_contention="retry")
    def plain() -> None:
        ran.append("ran")

    with pytest.raises(LockConfigurationError, match="neither a Celery task nor a Django task"):
        plain()
    assert ran == []
    assert get_lock("plain-free") is None  # nothing was taken


def test_a_django_task_that_finds_the_lock_taken_is_enqueued_again_for_later() -> None:
    """``on_contention="retry"`` on a Django task (``takes_context=True``): the run that
    finds the lock taken enqueues the task again, to run after the estimated wait, and
    returns ``skip_result``; the run after that does the work."""
    task = decorated_tasks.daily_report
    backend: Any = task.get_backend()  # the DummyBackend: it keeps what is enqueued
    backend.results.clear()
    first = task.enqueue("2026-11-24")  # kept by the "deferred" backend, as a worker would
    context = TaskContext(task_result=first)
    with Lock("report:2026-11-24", timeout=30):
        before = timezone.now()
        returned = task.func(context, "2026-11-24")  # what a worker runs
    assert returned == SKIPPED
    assert decorated_tasks.runs == []
    again = backend.results[-1]
    assert again.id != first.id and again.args == ["2026-11-24"]
    assert again.task.run_after is not None
    assert before + timedelta(seconds=1) <= again.task.run_after <= before + timedelta(seconds=31)
    assert task.func(TaskContext(task_result=again), "2026-11-24") == "report 2026-11-24"


def test_a_celery_task_that_finds_the_lock_taken_retries_after_the_estimated_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    task = decorated_tasks.celery_retrying
    asked: list[dict[str, Any]] = []
    retry = task.retry

    def recorded(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs)
        return retry(*args, **kwargs)

    monkeypatch.setattr(task, "retry", recorded)
    lock = Lock("celery-retry:a", timeout=30)
    for _ in range(2):  # holds of a moment: the estimate is the floor of 1 s
        assert lock.acquire()
        lock.release()
    with Lock("celery-retry:a", timeout=30), pytest.raises(Retry) as info:
        task.apply(args=("a",))  # (eager, in this process: the retry is raised to us)
    assert decorated_tasks.runs == []  # it did not run while the lock was held
    assert asked == [{"countdown": 1, "exc": info.value.exc}]
    assert isinstance(info.value.exc, LockNotAcquired)
    assert task.apply(args=("a",)).get() == "rebuilt a"


# -- rough edges a new user met -----------------------------------------------------------------
def test_a_nested_call_with_the_same_name_says_it_is_held_by_this_caller() -> None:
    """Two decorated functions (or a recursive one) with one name, called one inside the
    other in one thread: the inner call used to say "held by someone else; likely free in
    60 s". Locks are not re-entrant: it is this caller that holds it."""

    @redis_lock("nested:{pk}", timeout=10, on_contention="skip")
    def inner(pk: int) -> str:
        return "inner ran"

    @redis_lock("nested:{pk}", timeout=10)
    def outer(pk: int) -> str | None:
        return inner(pk)

    with pytest.raises(LockAlreadyHeld, match=r"'nested:1' is already held by this caller"):
        outer(1)
    assert inner(1) == "inner ran"  # the outer hold was given back

    @redis_lock("nested:{pk}", timeout=10)
    def other(pk: int) -> str:
        return "other ran"

    @redis_lock("nested:{pk}", timeout=10)
    def outer_on_another_name(pk: int) -> str:
        return other(pk + 1)  # another name: not nested

    assert outer_on_another_name(1) == "other ran"


def test_a_nested_async_call_with_the_same_name_says_it_is_held_by_this_caller() -> None:
    @redis_lock("anested:{pk}", timeout=10)
    async def inner(pk: int) -> str:
        return "inner ran"

    @redis_lock("anested:{pk}", timeout=10)
    async def outer(pk: int) -> str:
        return await inner(pk)

    async def scenario() -> None:
        with pytest.raises(LockAlreadyHeld, match="already held by this caller"):
            await outer(1)
        assert await inner(1) == "inner ran"  # the outer hold was given back

    asyncio.run(scenario())


def test_a_nested_call_naming_the_default_alias_says_it_is_held_by_this_caller() -> None:
    """``using=None`` is the ``CACHE_ALIAS`` setting ("locks" here): the same lock as
    ``using="locks"``. A nested call that named the alias while the outer one left it to the
    setting (or the other way round) used to be told "held by someone else"."""

    @redis_lock("alias-nested:{pk}", timeout=10, using="locks", on_contention="skip")
    def named(pk: int) -> str:
        return "named ran"

    @redis_lock("alias-nested:{pk}", timeout=10)
    def by_setting(pk: int) -> str | None:
        return named(pk)

    @redis_lock("alias-nested:{pk}", timeout=10, using="locks")
    def named_outer(pk: int) -> str | None:
        return by_setting(pk)

    with pytest.raises(LockAlreadyHeld, match=r"'alias-nested:1' is already held by this caller"):
        by_setting(1)
    with pytest.raises(LockAlreadyHeld, match=r"'alias-nested:2' is already held by this caller"):
        named_outer(2)
    assert named(1) == "named ran"  # nothing was left held


def test_a_nested_call_in_work_that_keeps_the_hold_says_it_is_held_by_this_caller() -> None:
    """A streamed response keeps its view's hold until it is sent, and a coroutine returned
    by a callable not seen as async keeps it until it finishes: that later work is the
    call's own, so a decorated call of the same name made in it is nested too. It used to
    be told "held by someone else" (LockNotAcquired), or skipped."""

    @redis_lock("kept-nested:{pk}", timeout=10)
    def part(pk: int) -> bytes:
        return b"part"

    @redis_lock("kept-nested:{pk}", timeout=10)
    def export(request: HttpRequest, pk: int) -> StreamingHttpResponse:
        def rows() -> Iterator[bytes]:
            yield b"head,"
            yield part(pk)

        return StreamingHttpResponse(rows())

    response = export(RequestFactory().get("/"), pk=1)
    chunks = iter(response)
    assert next(chunks) == b"head,"
    with pytest.raises(LockAlreadyHeld, match=r"'kept-nested:1' is already held by this caller"):
        next(chunks)
    response.close()
    assert get_lock("kept-nested:1") is None
    assert part(1) == b"part"  # (no step of the stream left its mark behind)

    @redis_lock("kept-nested:{pk}", timeout=10)
    async def apart(pk: int) -> bytes:
        return b"part"

    @redis_lock("kept-nested:{pk}", timeout=10)
    async def aexport(request: HttpRequest, pk: int) -> StreamingHttpResponse:
        async def rows() -> AsyncIterator[bytes]:
            yield b"head,"
            yield await apart(pk)

        return StreamingHttpResponse(rows())

    class Report:  # an async __call__: taken for sync, its coroutine keeps the hold
        async def __call__(self, pk: int) -> bytes:
            return await apart(pk)

    report = redis_lock("kept-nested:{pk}", timeout=10)(Report())

    async def scenario() -> None:
        response = await aexport(RequestFactory().get("/"), pk=2)
        chunks = aiter(response)
        assert await anext(chunks) == b"head,"
        with pytest.raises(LockAlreadyHeld, match=r"'kept-nested:2' is already held by this"):
            await anext(chunks)
        await sync_to_async(response.close)()
        with pytest.raises(LockAlreadyHeld, match=r"'kept-nested:3' is already held by this"):
            await report(3)
        assert await apart(2) == await apart(3) == b"part"

    asyncio.run(scenario())
    assert get_lock("kept-nested:2") is None and get_lock("kept-nested:3") is None


def test_redis_lock_above_an_unfinalized_shared_task_is_refused() -> None:
    """In a web process the Celery app is not finalized yet: ``@shared_task`` returns a
    proxy, which ``@redis_lock`` used to accept silently (the task then ran unlocked), while
    a worker refused the same module at start."""
    code = (
        "from celery import Celery, shared_task\n"
        "Celery('web')\n"
        "from django_redis_locks import redis_lock\n"
        "try:\n"
        "    @redis_lock('x:{a}')\n"
        "    @shared_task\n"
        "    def f(a): return a\n"
        "except TypeError as error:\n"
        "    print('refused:', error)\n"
        "else:\n"
        "    print('accepted')\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + code],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        check=True,
    )
    assert done.stdout.startswith("refused:"), done.stdout + done.stderr
    assert "put @shared_task / @app.task above @redis_lock" in done.stdout


BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


@pytest.mark.urls("tests.django.decorated_views")
def test_a_409_answers_json_when_the_request_accepts_json() -> None:
    with Lock("order:7", timeout=10):
        plain = Client().get("/charge/7/")
        wanted = Client().get("/charge/7/", headers={"Accept": "application/json"})
        browser = Client().get("/charge/7/", headers={"Accept": BROWSER_ACCEPT})
    assert plain.status_code == wanted.status_code == browser.status_code == 409
    assert plain["Content-Type"].startswith("text/plain")
    assert browser["Content-Type"].startswith("text/plain")  # (*/* is no wish for JSON)
    assert wanted["Content-Type"] == "application/json"
    body = wanted.json()
    assert body["error"] == "locked" and body["retry_after"] == int(wanted["Retry-After"])
    assert "busy" in body["detail"]


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "None"), (True, "True"), (False, "False"), (b"ab", "b'ab'")],
)
def test_none_booleans_and_bytes_never_share_a_name_with_their_text(value: Any, text: str) -> None:
    """The reference says distinct values give distinct names; ``str()`` made ``None`` and
    ``"None"`` one name: every anonymous user of ``"user:{request.user.pk}"`` shared
    ``user:None`` with a URL value ``"None"``. Ints and their digits still share a name, as
    documented (a URL gives ``"7"`` where a task gives ``7``)."""
    names: list[str] = []

    @redis_lock("value:{v}", timeout=10)
    def seen(v: Any) -> None:
        names.append(decorated_lock_name())

    seen(value)
    seen(text)
    assert names[0] != names[1]
    assert bounded_name(names[0]) == names[0]
    names.clear()
    seen(7)
    seen("7")
    assert names[0] == names[1] == "value:7"


def test_a_format_spec_that_does_not_fit_the_value_is_an_invalid_argument() -> None:
    """``{n:05d}`` given a string: ``format()`` raised its own ValueError ("Unknown format
    code 'd'"), which names neither the template nor the function. It is InvalidArgument
    (``argument == "key"``), as for any field that fails, and the body does not run."""
    ran: list[Any] = []

    @redis_lock("page:{n:05d}", timeout=10)
    def page(n: Any) -> None:
        ran.append(n)

    page(7)
    with pytest.raises(InvalidArgument, match=r"template 'page:\{n:05d\}' failed") as info:
        page("seven")
    assert info.value.argument == "key"
    assert ran == [7]


def decorated_lock_name() -> str:
    """The name of the lock the running decorated call holds (from the registry)."""
    [info] = list_locks("value:").items
    return info.name


# -- a hold lost while the call ran -----------------------------------------------------------
@pytest.mark.urls("tests.django.decorated_views")
def test_a_view_whose_lock_was_force_released_answers_its_own_response(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The view finished its work: it answers its response (a 500 would tell the client it
    failed, and invite a retry of work already done); the loss is logged at ERROR."""
    with caplog.at_level(logging.ERROR, logger="django_redis_locks.decorators"):
        response = Client().get("/evicted/1/")
    assert response.status_code == 200 and response.content == b"done 1"
    assert "lost: lock 'evicted:1' was lost while" in caplog.text
    assert "its result is returned" in caplog.text


@pytest.mark.urls("tests.django.decorated_views")
def test_an_async_view_whose_lock_was_force_released_answers_its_own_response() -> None:
    response = asyncio.run(AsyncClient().get("/aevicted/2/"))
    assert response.status_code == 200 and response.content == b"done 2"


@pytest.mark.urls("tests.django.decorated_views")
def test_a_view_whose_lock_was_lost_raises_under_on_lost_raise(settings: Any) -> None:
    client = Client(raise_request_exception=False)
    assert client.get("/evicted-strict/3/").status_code == 500  # on_lost="raise"
    settings.DJANGO_REDIS_LOCKS = {**settings.DJANGO_REDIS_LOCKS, "VIEW_ON_LOCK_LOST": "raise"}
    assert client.get("/evicted/4/").status_code == 500
    with pytest.raises(LockLost, match="force-released"):
        Client().get("/evicted/5/")


def test_a_function_whose_lock_was_lost_raises_unless_on_lost_return(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @redis_lock("evicted-job")
    def job() -> str:
        decorated_views.evict_own_hold("evicted-job")
        return "result"

    @redis_lock("evicted-job", on_lost="return")
    def lenient() -> str:
        decorated_views.evict_own_hold("evicted-job")
        return "result"

    with pytest.raises(LockLost):
        job()
    with caplog.at_level(logging.ERROR, logger="django_redis_locks.decorators"):
        assert lenient() == "result"
    assert "lost: lock 'evicted-job' was lost while" in caplog.text
    with pytest.raises(ValueError, match="on_lost"):
        redis_lock("x", on_lost="ignore")  # type: ignore[call-overload]

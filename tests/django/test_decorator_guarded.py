"""No body of a ``@redis_lock``-decorated call runs without its lock.

Two ways it used to: a call that did not bind the signature the decorator read (a class
view's ``as_view()`` whose ``dispatch`` carries ``method_decorator(csrf_exempt)``, whose
``__wrapped__`` says ``(self, request, ...)``; a ``functools.wraps`` decorator that injects
an argument) ran with no lock at all; and a view's streamed response (StreamingHttpResponse,
FileResponse) was produced after the lock was released, when the server iterated it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from asgiref.sync import iscoroutinefunction, sync_to_async
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.signals import request_finished
from django.http import FileResponse, HttpRequest, HttpResponse, StreamingHttpResponse
from django.test import AsyncClient, Client, RequestFactory
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from django_redis_locks import (
    InvalidArgument,
    InvalidArgumentType,
    Lock,
    LockLost,
    LockNotAcquired,
    redis_lock,
)
from django_redis_locks.decorators.names import Namer, signatures_of
from django_redis_locks.inspection import get_lock
from tests.harness.servers import wait_until

# (Closing a response sends request_finished, which looks at the database connections.)
pytestmark = pytest.mark.django_db(transaction=True)

#: What the bodies saw: (where, whether the lock of the call was held as Redis says).
seen: list[tuple[str, bool]] = []


@pytest.fixture(autouse=True)
def _namespace(settings: Any, namespace: str) -> Iterator[None]:
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    seen.clear()
    yield
    seen.clear()


def _held(name: str) -> bool:
    """Whether ``name`` is held, as the lock listing (Redis itself) says."""
    return get_lock(name) is not None


def _record(where: str, name: str) -> None:
    seen.append((where, _held(name)))


def _streamed(response: Any) -> StreamingHttpResponse:
    """A test client's response, as the streamed response it is."""
    assert isinstance(response, StreamingHttpResponse)
    return response


def _call(view: Callable[..., Any], request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
    """Call a view as Django's handler does: await it if it is (or returns) a coroutine."""
    result = view(request, *args, **kwargs)
    if inspect.isawaitable(result):

        async def wait() -> Any:
            return await result

        return asyncio.run(wait())
    return result


# == Defect A: a call that does not bind the signature read through __wrapped__ ================
@method_decorator(csrf_exempt, name="dispatch")
class ExemptInvoice(View):
    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        _record("exempt", f"invoice:{pk}")
        return HttpResponse(f"invoice {pk}")


@method_decorator(csrf_exempt, name="dispatch")
class AsyncExemptInvoice(View):
    async def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        seen.append(("async exempt", await sync_to_async(_held)(f"invoice:{pk}")))
        return HttpResponse(f"invoice {pk}")


@method_decorator(login_required, name="dispatch")
class PrivateInvoice(View):
    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        _record("private", f"invoice:{pk}")
        return HttpResponse(f"invoice {pk}")


@method_decorator(login_required, name="dispatch")
class AsyncPrivateInvoice(View):
    async def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        seen.append(("async private", await sync_to_async(_held)(f"invoice:{pk}")))
        return HttpResponse(f"invoice {pk}")


exempt_invoice = redis_lock("invoice:{pk}", timeout=10)(ExemptInvoice.as_view())
async_exempt_invoice = redis_lock("invoice:{pk}", timeout=10)(AsyncExemptInvoice.as_view())
private_invoice = redis_lock("invoice:{pk}", timeout=10)(PrivateInvoice.as_view())
async_private_invoice = redis_lock("invoice:{pk}", timeout=10)(AsyncPrivateInvoice.as_view())

CLASS_VIEWS = {
    "csrf_exempt": exempt_invoice,
    "async csrf_exempt": async_exempt_invoice,
    "login_required": private_invoice,
    "async login_required": async_private_invoice,
}


def _logged_in(request: HttpRequest) -> HttpRequest:
    user = User(username="ada")  # (unsaved: login_required only asks is_authenticated)

    async def auser() -> User:
        return user

    request.user = user
    request.auser = auser
    return request


@pytest.mark.parametrize("kind", list(CLASS_VIEWS))
def test_a_class_view_with_a_decorated_dispatch_runs_under_its_lock(kind: str) -> None:
    """``redis_lock("invoice:{pk}")(View.as_view())`` with method_decorator on dispatch.
    Failed before: 200 and the body ran while another Lock held invoice:7 (the call did
    not bind ``(self, request, *args, **kwargs)``, read through ``__wrapped__``, and ran
    unguarded; the async views were not even seen as async on Python 3.11)."""
    view = CLASS_VIEWS[kind]
    is_async = kind.startswith("async")
    assert iscoroutinefunction(view) is is_async
    request = _logged_in(RequestFactory().post("/invoice/7/"))
    with Lock("invoice:7", timeout=10):
        busy = _call(view, request, pk=7)
    assert busy.status_code == 409 and "Retry-After" in busy
    assert seen == []  # the body did not run while the name was held elsewhere
    free = _call(view, _logged_in(RequestFactory().post("/invoice/7/")), pk=7)
    assert free.status_code == 200 and free.content == b"invoice 7"
    assert [held for _, held in seen] == [True]  # it ran holding invoice:7
    assert not _held("invoice:7")


@pytest.mark.urls("tests.django.test_decorator_guarded")
def test_class_views_keyed_by_url_kwargs_through_the_clients() -> None:
    """The name comes from the URL's kwargs, through Django's handlers, sync and async."""
    assert Client().post("/exempt/5/").content == b"invoice 5"
    with Lock("invoice:6", timeout=10):
        assert Client().post("/exempt/6/").status_code == 409

    async def through_the_async_client() -> tuple[int, int]:
        free = (await AsyncClient().post("/async-exempt/5/")).status_code
        async with Lock("invoice:6", timeout=10):
            busy = (await AsyncClient().post("/async-exempt/6/")).status_code
        return free, busy

    assert asyncio.run(through_the_async_client()) == (200, 409)
    assert seen == [("exempt", True), ("async exempt", True)]


ACCOUNT = "acme"


def with_account(view: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator under @redis_lock that injects an argument (and copies __wrapped__)."""
    if iscoroutinefunction(view):

        @functools.wraps(view)
        async def awrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            return await view(request, ACCOUNT, *args, **kwargs)

        return awrapper

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        return view(request, ACCOUNT, *args, **kwargs)

    return wrapper


@redis_lock("doc:{doc_id}", timeout=10)
@with_account
def edit_doc(request: HttpRequest, account: str, doc_id: int) -> HttpResponse:
    _record(f"edit {account}", f"doc:{doc_id}")
    return HttpResponse(f"{account} {doc_id}")


@redis_lock("doc:{doc_id}", timeout=10)
@with_account
async def aedit_doc(request: HttpRequest, account: str, doc_id: int) -> HttpResponse:
    seen.append((f"aedit {account}", await sync_to_async(_held)(f"doc:{doc_id}")))
    return HttpResponse(f"{account} {doc_id}")


@pytest.mark.parametrize("view", [edit_doc, aedit_doc], ids=["sync", "async"])
def test_a_wraps_decorator_that_injects_an_argument_runs_under_the_lock(
    view: Callable[..., Any],
) -> None:
    """Failed before: the call ``(request, doc_id=3)`` did not bind ``(request, account,
    doc_id)`` (read through ``__wrapped__``), so the body ran, 200, while doc:3 was held."""
    with Lock("doc:3", timeout=10):
        assert _call(view, RequestFactory().get("/"), doc_id=3).status_code == 409
    assert seen == []
    assert _call(view, RequestFactory().get("/"), doc_id=3).content == b"acme 3"
    assert [held for _, held in seen] == [True]


def test_a_call_that_fits_no_signature_raises_a_type_error_naming_the_lock() -> None:
    """A plain function called with arguments it does not take: the body never runs, and the
    error is a TypeError (as calling the function would give) that names the template, the
    function and the argument. Failed before: Python's own TypeError, nothing of the lock."""
    ran: list[int] = []

    @redis_lock("job:{a}")
    def job(a: int) -> None:
        ran.append(a)

    with pytest.raises(InvalidArgumentType) as missing:
        job()  # type: ignore[call-arg]
    message = str(missing.value)
    assert "'job:{a}'" in message and "job" in message and "'a'" in message
    assert isinstance(missing.value, TypeError) and missing.value.argument == "key"
    with pytest.raises(InvalidArgumentType, match="too many positional arguments"):
        job(1, 2)  # type: ignore[call-arg]
    with pytest.raises(InvalidArgumentType, match="unexpected keyword argument 'b'"):
        job(1, b=2)  # type: ignore[call-arg]
    assert ran == []


def passthrough(func: Callable[..., Any]) -> Callable[..., Any]:
    """A wrapper that takes an option of its own and passes the rest through."""

    @functools.wraps(func)
    def wrapper(*args: Any, retries: int = 0, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


def test_a_call_whose_name_cannot_be_built_raises_instead_of_running_unguarded() -> None:
    """The call binds the outer wrapper, but no signature gives the template's field a value:
    a clear error, and the body never runs. Failed before: ``job(5, retries=1)`` did not
    bind ``(a)`` (read through ``__wrapped__``) and ran without any lock."""
    ran: list[int] = []

    @redis_lock("job:{a}")
    @passthrough
    def job(a: int) -> None:
        ran.append(a)

    job(5)  # positional: the wrapped function's signature names it
    job(a=6, retries=1)  # by keyword: the wrapper's own signature has it
    assert ran == [5, 6]
    with Lock("job:5", timeout=10), pytest.raises(InvalidArgument) as info:
        job(5, retries=1)
    message = str(info.value)
    assert "'job:{a}'" in message and "{a}" in message and "job" in message
    assert "not run" in message
    assert ran == [5, 6]
    request = RequestFactory().post("/invoice/7/")
    with pytest.raises(InvalidArgument, match=r"\{pk\}"):
        exempt_invoice(request, "7")  # a positional URL argument: no pk to name the lock
    assert seen == []


def test_the_fast_path_names_wrapped_calls_as_the_general_path_does() -> None:
    """Behind a ``(*args, **kwargs)`` wrapper the fast path reads the wrapped function's
    signature: it gives the names the general path gives, or leaves the call to it."""

    def logged(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs)

        return wrapper

    @logged
    def job(a: int, b: int = 2, *, c: int = 3) -> None: ...

    namer = Namer("job:{a}:{b}:{c}", signatures_of(job), "job")
    assert len(namer.signatures) == 2 and namer._compiled is not None
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((1,), {}),
        ((1, 5), {}),
        ((), {"a": 1, "c": 4}),
        ((), {"a": 1, "b": 7, "c": 3, "d": 2}),  # does not fit job: named from **kwargs
    ]
    for args, kwargs in calls:
        fast = namer.name(args, kwargs)
        compiled, namer._compiled = namer._compiled, None
        try:
            assert namer.name(args, kwargs) == fast
        finally:
            namer._compiled = compiled
    assert [namer.name(args, kwargs) for args, kwargs in calls] == [
        "job:1:2:3",
        "job:1:5:3",
        "job:1:2:4",
        "job:1:7:3",
    ]


class AsyncCallable:
    """An object whose ``__call__`` is async: not a coroutine function to ``inspect``."""

    def __init__(self) -> None:
        self.held: list[bool] = []

    async def __call__(self, key: str) -> str:
        self.held.append(await sync_to_async(_held)(f"obj:{key}"))
        return key


def test_a_callable_that_returns_a_coroutine_keeps_its_lock_until_it_finishes() -> None:
    """Failed before: the lock was released when the coroutine was returned, before its
    body ran (held == [False])."""
    target = AsyncCallable()
    guarded = redis_lock("obj:{key}", timeout=10)(target)

    async def scenario() -> None:
        assert await guarded("k") == "k"
        with Lock("obj:k", timeout=10), pytest.raises(LockNotAcquired):
            await guarded("k")

    asyncio.run(scenario())
    assert target.held == [True]
    assert not _held("obj:k")


# == Defect B: a streamed response produced after the lock was released =======================
def _chunks(name: str, count: int, fail_after: int | None = None) -> Iterator[bytes]:
    try:
        for index in range(count):
            if fail_after is not None and index == fail_after:
                raise RuntimeError("the stream failed")
            yield f"{index},".encode()
    finally:
        _record("generator finally", name)


async def _achunks(name: str, count: int, fail_after: int | None = None) -> AsyncIterator[bytes]:
    try:
        for index in range(count):
            if fail_after is not None and index == fail_after:
                raise RuntimeError("the stream failed")
            await asyncio.sleep(0)
            yield f"{index},".encode()
    finally:
        seen.append(("generator finally", await sync_to_async(_held)(name)))


@redis_lock("stream:{pk}", timeout=10)
def stream(request: HttpRequest, pk: int, fail_after: int | None = None) -> StreamingHttpResponse:
    return StreamingHttpResponse(_chunks(f"stream:{pk}", 3, fail_after))


@redis_lock("stream:{pk}", timeout=10)
async def astream(
    request: HttpRequest, pk: int, fail_after: int | None = None
) -> StreamingHttpResponse:
    return StreamingHttpResponse(_achunks(f"stream:{pk}", 3, fail_after))


@redis_lock("stream:{pk}", timeout=10)
async def astream_sync_content(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    return StreamingHttpResponse(_chunks(f"stream:{pk}", 3))


def test_a_streamed_response_holds_the_lock_until_it_is_closed() -> None:
    """As a WSGI server serves it: iterate, then close. Failed before: the name was free
    once the view returned, while the first chunk was being produced."""
    response = stream(RequestFactory().get("/"), pk=1)
    assert _held("stream:1")  # returned, not yet streamed: still held
    chunks = iter(response)
    assert next(chunks) == b"0,"
    assert _held("stream:1")
    with pytest.raises(LockNotAcquired):
        Lock("stream:1", blocking=False).__enter__()
    assert b"".join(chunks) == b"1,2,"
    response.close()
    assert not _held("stream:1")
    assert seen == [("generator finally", True)]  # its cleanup ran under the lock too
    assert b"".join(_call(stream, RequestFactory().get("/"), pk=1)) == b"0,1,2,"  # free again


def test_a_stream_closed_early_or_never_iterated_is_released_on_close() -> None:
    """A client that goes away: the server closes the response after the first chunk, or
    before iterating at all."""
    response = stream(RequestFactory().get("/"), pk=2)
    assert next(iter(response)) == b"0,"
    response.close()
    assert not _held("stream:2")
    assert seen == [("generator finally", True)]
    untouched = stream(RequestFactory().get("/"), pk=2)
    assert _held("stream:2")
    untouched.close()
    assert not _held("stream:2")


def test_an_exception_inside_the_stream_releases_the_lock() -> None:
    response = stream(RequestFactory().get("/"), pk=3, fail_after=1)
    chunks = iter(response)
    assert next(chunks) == b"0,"
    assert _held("stream:3")
    with pytest.raises(RuntimeError, match="the stream failed"):
        next(chunks)
    assert not _held("stream:3")  # released when the stream failed, before close()
    response.close()
    assert seen == [("generator finally", True)]


@pytest.mark.urls("tests.django.test_decorator_guarded")
def test_the_test_client_streams_under_the_lock() -> None:
    response = _streamed(Client().get("/stream/4/"))
    chunks = iter(response)
    assert next(chunks) == b"0,"
    assert _held("stream:4")
    assert Client().get("/stream/4/").status_code == 409
    assert b"".join(chunks) == b"1,2,"  # the client closes the response at the end
    assert not _held("stream:4")


def test_a_file_response_holds_the_lock_until_it_is_closed(tmp_path: Path) -> None:
    """FileResponse keeps its file for wsgi.file_wrapper (sendfile); the lock is released
    when the response is closed, which the server does after sending the file."""
    report = tmp_path / "report.csv"
    report.write_bytes(b"a,b\n" * 10)

    @redis_lock("file:{pk}", timeout=10)
    def download(request: HttpRequest, pk: int) -> FileResponse:
        return FileResponse(report.open("rb"), as_attachment=True)

    response = download(RequestFactory().get("/"), pk=1)
    assert response.file_to_stream is not None  # still served by the file wrapper
    response.block_size = 8
    chunks = iter(response)
    assert next(chunks) == b"a,b\na,b\n"
    assert _held("file:1")
    assert len(b"".join(chunks)) == 32
    response.close()
    assert not _held("file:1")


def test_a_streamed_response_is_renewed_past_its_ttl_while_streaming() -> None:
    @redis_lock("slow-stream", timeout=0.5)
    def slow(request: HttpRequest) -> StreamingHttpResponse:
        return StreamingHttpResponse(_chunks("slow-stream", 3))

    response = slow(RequestFactory().get("/"))
    chunks = iter(response)
    assert next(chunks) == b"0,"
    hold = get_lock("slow-stream")
    assert hold is not None
    started = time.monotonic()
    wait_until(lambda: time.monotonic() - started > 1.6, timeout=5, what="over three TTLs")
    again = get_lock("slow-stream")
    assert again is not None and again.holder_id == hold.holder_id  # the same hold, renewed
    assert b"".join(chunks) == b"1,2,"
    response.close()
    assert not _held("slow-stream")


def test_a_hold_lost_while_streaming_raises_lock_lost_at_the_end_of_the_stream() -> None:
    """As a decorated call whose hold was lost raises LockLost after it: the stream ends in
    that error (a server cuts the response short and logs it)."""

    @redis_lock("lost-stream", timeout=0.3, auto_renew=False)
    def unrenewed(request: HttpRequest) -> StreamingHttpResponse:
        return StreamingHttpResponse(_chunks("lost-stream", 2))

    response = unrenewed(RequestFactory().get("/"))
    chunks = iter(response)
    assert next(chunks) == b"0,"
    wait_until(lambda: not _held("lost-stream"), timeout=5, what="the TTL to run out")
    with pytest.raises(LockLost, match="lost-stream"):
        list(chunks)
    response.close()


def test_an_async_streamed_response_holds_the_lock_until_it_is_closed() -> None:
    """As Django's ASGI handler serves it: the view and the stream in one task, then
    ``response.close()`` in a thread. Failed before: free while the first chunk was read."""

    async def scenario() -> None:
        response = await astream(RequestFactory().get("/"), pk=5)
        chunks = aiter(response)
        assert await anext(chunks) == b"0,"
        assert await Lock("stream:5").alocked()
        assert [chunk async for chunk in chunks] == [b"1,", b"2,"]
        await sync_to_async(response.close)()
        assert not await Lock("stream:5").alocked()

    asyncio.run(scenario())
    assert seen == [("generator finally", True)]


def test_an_async_stream_closed_early_or_failing_releases_the_lock() -> None:
    async def scenario() -> None:
        early = await astream(RequestFactory().get("/"), pk=6)
        chunks = cast(AsyncGenerator[bytes, None], early.__aiter__())
        assert await anext(chunks) == b"0,"
        await chunks.aclose()  # the client went away (Django's handler uses aclosing())
        assert await Lock("stream:6").alocked()  # still until the response is closed...
        await sync_to_async(early.close)()
        assert not await Lock("stream:6").alocked()  # ...from a thread, as Django does

        failing = await astream(RequestFactory().get("/"), pk=7, fail_after=1)
        rest = aiter(failing)
        assert await anext(rest) == b"0,"
        assert await Lock("stream:7").alocked()
        with pytest.raises(RuntimeError, match="the stream failed"):
            await anext(rest)
        assert not await Lock("stream:7").alocked()
        await sync_to_async(failing.close)()

    asyncio.run(scenario())


@pytest.fixture
def no_async_request_finished_receivers() -> Iterator[None]:
    """Django's AsyncClient closes a streamed response with the synchronous close() inside
    the event loop, which sends request_finished synchronously: an async receiver (django-
    valkey connects one, to close its async caches) then raises RuntimeError in the test
    client itself. Such receivers are left out while the test runs."""
    _, receivers = request_finished._live_receivers(None)
    for receiver in receivers:
        request_finished.disconnect(receiver)
    try:
        yield
    finally:
        for receiver in receivers:
            request_finished.connect(receiver)


@pytest.mark.urls("tests.django.test_decorator_guarded")
@pytest.mark.usefixtures("no_async_request_finished_receivers")
def test_the_async_client_streams_under_the_lock() -> None:
    async def scenario() -> None:
        response = _streamed(await AsyncClient().get("/astream/8/"))
        chunks = aiter(response)
        assert await anext(chunks) == b"0,"
        assert await Lock("stream:8").alocked()
        assert (await AsyncClient().get("/astream/8/")).status_code == 409
        assert [chunk async for chunk in chunks] == [b"1,", b"2,"]
        assert not await Lock("stream:8").alocked()

    asyncio.run(scenario())


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume:Warning")
@pytest.mark.urls("tests.django.test_decorator_guarded")
def test_streams_crossing_sync_and_async_are_held_and_released() -> None:
    """An async view streaming a sync generator, served by the sync client (WSGI); a sync
    view streaming through the async client (ASGI consumes it in a thread): released by
    whichever thread or task ends the stream, not only by the one that took the lock."""
    response = _streamed(Client().get("/astream-sync/9/"))
    chunks = iter(response)
    assert next(chunks) == b"0,"
    assert _held("stream:9")
    assert b"".join(chunks) == b"1,2,"
    assert not _held("stream:9")

    async def scenario() -> None:
        response = _streamed(await AsyncClient().get("/stream/10/"))
        assert b"".join([chunk async for chunk in response]) == b"0,1,2,"  # (in a thread)
        assert not await Lock("stream:10").alocked()

    asyncio.run(scenario())
    assert [held for _, held in seen] == [True, True]


urlpatterns = [
    path("exempt/<int:pk>/", exempt_invoice),
    path("async-exempt/<int:pk>/", async_exempt_invoice),
    path("stream/<int:pk>/", stream),
    path("astream/<int:pk>/", astream),
    path("astream-sync/<int:pk>/", astream_sync_content),
]

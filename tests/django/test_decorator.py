"""@redis_lock on functions, views (sync, async, class-based) and tasks (Django's, Celery's)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import AsyncClient, Client, override_settings

from django_redis_locks import (
    InvalidArgument,
    InvalidArgumentType,
    Lock,
    LockAlreadyHeld,
    LockBackendError,
    LockLost,
    LockNotAcquired,
    redis_lock,
)
from django_redis_locks.decorators.names import MAX_VALUE_CHARS, encode_value
from django_redis_locks.inspection import get_lock
from django_redis_locks.signals import hold_acquired, hold_contended, hold_lost, hold_released
from django_redis_locks.testing import capture_holds
from tests.django import decorated_tasks, decorated_views
from tests.harness.servers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _namespace(settings, namespace: str) -> None:
    """Each test's locks in a namespace of its own."""
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    decorated_views.probe = decorated_views.Probe()
    decorated_tasks.runs.clear()


# -- names ----------------------------------------------------------------------------------
def test_values_are_encoded_so_they_cannot_forge_other_names() -> None:
    assert encode_value(42) == "42"
    assert encode_value("a:b") == "a%3Ab"
    assert encode_value("{x}") == "%7Bx%7D"
    assert encode_value("../../admin\n") == "..%2F..%2Fadmin%0A"
    assert encode_value("é") == "%C3%A9"
    long = encode_value("x" * 1000)
    assert long.startswith("~") and len(long) <= MAX_VALUE_CHARS
    assert encode_value("x" * 1000) != encode_value("x" * 999)


def test_the_name_comes_from_bound_arguments_defaults_and_attributes() -> None:
    seen: list[str | None] = []

    class User_:
        pk = 7

    @redis_lock("job:{kind}:{user.pk}:{page}")
    def job(user: Any, kind: str, page: int = 1) -> None:
        hold = get_lock(f"job:{kind}:{user.pk}:{page}")
        seen.append(None if hold is None else hold.name)

    job(User_(), "export:csv")
    assert seen == [None]  # the ":" of the value was encoded: the name is job:export%3Acsv:7:1
    job(User_(), kind="plain", page=3)
    assert seen[-1] == "job:plain:7:3"


def test_a_callable_key_gives_the_name() -> None:
    @redis_lock(lambda x, y: f"sum:{x + y}")
    def add(x: int, y: int) -> str | None:
        hold = get_lock("sum:5")
        return None if hold is None else hold.name

    assert add(2, 3) == "sum:5"


@pytest.mark.parametrize(
    ("key", "error", "words"),
    [
        ("", InvalidArgument, "empty"),
        (42, InvalidArgumentType, "template or a callable"),
        ("job:{missing}", InvalidArgument, "names no parameter"),
        ("job:{}", InvalidArgument, "name parameters"),
        ("job:{0}", InvalidArgument, "name parameters"),
        ("job:{x", InvalidArgument, "not a valid template"),
    ],
)
def test_bad_keys_are_refused_when_decorating(key: Any, error: type, words: str) -> None:
    with pytest.raises(error, match=words):

        @redis_lock(key)
        def job(x: int) -> None: ...


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"timeout": 0}, "timeout"),
        ({"blocking": "yes"}, "blocking"),
        ({"blocking_timeout": -1}, "blocking_timeout"),
        ({"on_contention": "ignore"}, "on_contention"),
        ({"on_redis_error": "maybe"}, "on_redis_error"),
        ({"wait_for_replicas": -1}, "wait_for_replicas"),
    ],
)
def test_bad_options_are_refused_when_decorating(kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises((InvalidArgument, InvalidArgumentType)) as info:
        redis_lock("x", **kwargs)
    assert getattr(info.value, "argument", None) == argument


# -- plain functions ------------------------------------------------------------------------
def test_contention_policies_raise_skip_and_callable() -> None:
    ran: list[str] = []

    @redis_lock("busy")
    def strict() -> str:
        ran.append("strict")
        return "done"

    @redis_lock("busy", on_contention="skip")
    def lenient() -> str:
        ran.append("lenient")
        return "done"

    @redis_lock("busy", on_contention=lambda error, *args: ("busy", error.retry_after, args))
    def custom(value: int) -> Any:
        ran.append("custom")
        return "done"

    with Lock("busy", timeout=5):
        with pytest.raises(LockNotAcquired) as info:
            strict()
        # No hold of the name ended yet: as long again as it has run, at least 1 s.
        assert info.value.retry_after is not None and 1 <= info.value.retry_after < 2
        assert lenient() is None
        answer = custom(3)
        assert answer[0] == "busy" and answer[2] == (3,)
    assert ran == []
    assert (strict(), lenient(), custom(3)) == ("done", "done", "done")
    assert ran == ["strict", "lenient", "custom"]


def test_blocking_waits_for_the_holder() -> None:
    @redis_lock("patient", blocking=True, blocking_timeout=10)
    def job() -> float:
        return time.monotonic()

    holder = Lock("patient", timeout=10)
    holder.acquire()
    result: list[float] = []
    thread = threading.Thread(target=lambda: result.append(job()))
    thread.start()
    released_at = time.monotonic()
    wait_until(lambda: time.monotonic() - released_at > 0.2, timeout=5, what="0.2 s")
    released_at = time.monotonic()
    holder.release()
    thread.join(timeout=10)
    assert result and result[0] >= released_at


def test_each_call_has_its_own_token_and_calls_do_not_nest() -> None:
    @redis_lock("nest:{depth}", on_contention="skip")
    def nested(depth: int) -> list[Any]:
        inner: Any = None
        if depth < 1:
            try:
                nested(depth)  # same name: held by the outer call, this very caller
            except LockAlreadyHeld as error:
                inner = type(error).__name__
        other = nested(depth + 1) if depth < 1 else [depth]  # another name: runs
        return [depth, inner, *(other or [])]

    assert nested(0) == [0, "LockAlreadyHeld", 1, None, 1]


def test_the_caller_label_and_metadata_are_recorded() -> None:
    seen: list[Any] = []

    @redis_lock("labelled")
    def job() -> None:
        seen.append(get_lock("labelled"))

    job()
    [hold] = seen
    assert hold.label == f"{__name__}.test_the_caller_label_and_metadata_are_recorded.<locals>.job"
    assert hold.pid is not None and hold.host


def test_a_lock_lost_during_the_call_is_reported_after_it(redis_client, namespace: str) -> None:
    ran: list[str] = []

    @redis_lock("short", timeout=0.3, auto_renew=False)
    def job() -> str:
        wait_until(lambda: get_lock("short") is None, timeout=5, what="the lock to expire")
        ran.append("done")
        return "result"

    with pytest.raises(LockLost):
        job()
    assert ran == ["done"]


def test_auto_renew_keeps_a_short_lock_for_a_long_call() -> None:
    @redis_lock("renewed", timeout=0.5)
    def job() -> bool:
        started = time.monotonic()
        wait_until(lambda: time.monotonic() - started > 1.6, timeout=5, what="1.6 s of work")
        return get_lock("renewed") is not None

    assert job() is True


def test_async_functions_stay_async_and_exclusive() -> None:
    inside = 0
    peak = 0

    @redis_lock("async-job", blocking=True, blocking_timeout=10)
    async def job() -> None:
        nonlocal inside, peak
        inside += 1
        peak = max(peak, inside)
        await asyncio.sleep(0.005)  # the work done under the lock
        inside -= 1

    assert inspect.iscoroutinefunction(job)

    async def main() -> None:
        await asyncio.gather(*(job() for _ in range(10)))

    asyncio.run(main())
    assert peak == 1


# -- Redis errors -----------------------------------------------------------------------------
@pytest.fixture
def dead_redis(settings, make_server) -> None:
    """The "locks" alias points at a server that is stopped."""
    server = make_server()
    url = server.url
    server.stop()
    caches = {**settings.CACHES}
    caches["locks"] = {**caches["locks"], "LOCATION": url}
    settings.CACHES = caches


def test_redis_errors_fail_closed_by_default(dead_redis, caplog) -> None:
    ran: list[str] = []

    @redis_lock("down")
    def job() -> None:
        ran.append("job")

    with (
        caplog.at_level(logging.ERROR, logger="django_redis_locks"),
        pytest.raises(LockBackendError),
    ):
        job()
    assert ran == []
    assert "fail_closed" in caplog.text


def test_redis_errors_fail_open_when_configured(settings, dead_redis, caplog) -> None:
    settings.DJANGO_REDIS_LOCKS = {**settings.DJANGO_REDIS_LOCKS, "ON_REDIS_ERROR": "fail_open"}
    ran: list[str] = []

    @redis_lock("down")
    def job() -> str:
        ran.append("job")
        return "ran"

    @redis_lock("down", on_redis_error="fail_closed")
    def strict() -> None:
        ran.append("strict")

    with caplog.at_level(logging.WARNING, logger="django_redis_locks"):
        assert job() == "ran"
    assert "fail_open" in caplog.text
    with pytest.raises(LockBackendError):
        strict()
    assert ran == ["job"]


@pytest.mark.urls("tests.django.decorated_views")
def test_views_answer_503_when_redis_fails(dead_redis) -> None:
    response = Client().get("/charge/1/")
    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert decorated_views.probe.served == 0


# -- views ------------------------------------------------------------------------------------
@pytest.mark.urls("tests.django.decorated_views")
def test_50_concurrent_requests_one_inside_the_rest_409_with_retry_after() -> None:
    probe = decorated_views.probe
    probe.gate = threading.Event()
    responses: list[Any] = []
    mutex = threading.Lock()

    def request() -> None:
        response = Client().get("/charge/7/")
        with mutex:
            responses.append(response)

    first = threading.Thread(target=request)
    first.start()
    assert probe.entered.wait(10)
    others = [threading.Thread(target=request) for _ in range(49)]
    for thread in others:
        thread.start()
    for thread in others:
        thread.join(timeout=30)
    probe.gate.set()  # all 49 answered while the first is still inside: now let it finish
    first.join(timeout=30)
    statuses = sorted(response.status_code for response in responses)
    assert statuses == [200] + [409] * 49
    conflicts = [r for r in responses if r.status_code == 409]
    assert all(1 <= int(r["Retry-After"]) <= 10 for r in conflicts)
    assert probe.peak == 1 and probe.served == 1


@pytest.mark.urls("tests.django.decorated_views")
def test_50_concurrent_blocking_requests_are_served_in_turn() -> None:
    responses: list[int] = []
    mutex = threading.Lock()

    def request() -> None:
        status = Client().get("/in-turn/3/").status_code
        with mutex:
            responses.append(status)

    threads = [threading.Thread(target=request) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert responses == [200] * 50
    assert decorated_views.probe.peak == 1 and decorated_views.probe.served == 50


@override_settings(DJANGO_REDIS_LOCKS={"CACHE_ALIAS": "locks", "VIEW_CONTENTION_STATUS": 429})
@pytest.mark.urls("tests.django.decorated_views")
def test_the_contention_status_is_configurable(namespace: str) -> None:
    with Lock("order:5", timeout=5):
        response = Client().get("/charge/5/")
    assert response.status_code == 429 and "Retry-After" in response


@pytest.mark.urls("tests.django.decorated_views")
def test_async_view_through_the_async_client() -> None:
    probe = decorated_views.probe

    async def scenario() -> list[int]:
        gate = decorated_views.async_gate["acharge"] = asyncio.Event()
        client = AsyncClient()
        first = asyncio.create_task(client.get("/acharge/9/"))
        while not probe.entered.is_set():
            await asyncio.sleep(0.005)  # let the first request in
        others = await asyncio.gather(*(AsyncClient().get("/acharge/9/") for _ in range(5)))
        gate.set()
        return [(await first).status_code, *(r.status_code for r in others)]

    try:
        statuses = asyncio.run(scenario())
    finally:
        decorated_views.async_gate.clear()
    assert statuses == [200, 409, 409, 409, 409, 409]
    assert probe.peak == 1


@pytest.mark.urls("tests.django.decorated_views")
def test_class_based_view_keyed_by_url_kwargs() -> None:
    response = Client().get("/item/12/")
    assert response.status_code == 200 and response.content == b"item 12"
    assert decorated_views.probe.names == ["item:12 tests.django.decorated_views.ItemView.get"]
    with Lock("item:12", timeout=5):
        assert Client().get("/item/12/").status_code == 409
        assert Client().get("/item/13/").status_code == 200


@pytest.mark.urls("tests.django.decorated_views")
def test_async_class_based_view() -> None:
    async def scenario() -> tuple[int, int]:
        free = (await AsyncClient().get("/async-item/4/")).status_code
        async with Lock("async-item:4", timeout=5):
            taken = (await AsyncClient().get("/async-item/4/")).status_code
        return free, taken

    assert asyncio.run(scenario()) == (200, 409)


@pytest.mark.urls("tests.django.decorated_views")
def test_view_keyed_by_request_user_and_by_kwargs() -> None:
    user = User.objects.create_user("ada", password="pw")
    client = Client()
    client.force_login(user)
    assert client.get("/report/").status_code == 200
    assert decorated_views.probe.names == [f"report:{user.pk}"]
    assert Client().get("/slug/a-b/").content == b"slug=a-b"


# -- tasks ------------------------------------------------------------------------------------
def test_django_task_framework_task_is_exclusive() -> None:
    result = decorated_tasks.rebuild.enqueue("main")
    assert result.return_value == "rebuilt main"
    with Lock("rebuild:main", timeout=5):
        skipped: object = decorated_tasks.rebuild.enqueue("main").return_value
        assert decorated_tasks.rebuild_or_fail.enqueue("x").return_value == "rebuilt x"
        with Lock("strict:x", timeout=5):
            failed = decorated_tasks.rebuild_or_fail.enqueue("x")
    assert skipped is None
    assert failed.status.name == "FAILED"
    assert "LockNotAcquired" in str(failed.errors[0].exception_class_path)
    assert decorated_tasks.runs == ["rebuild main", "strict x"]


def test_celery_shared_task_is_exclusive() -> None:
    assert decorated_tasks.celery_rebuild.delay("main").get() == "rebuilt main"
    with Lock("celery:main", timeout=5):
        assert decorated_tasks.celery_rebuild.delay("main").get() is None
    with Lock("celery-bound:b", timeout=5), pytest.raises(LockNotAcquired):
        decorated_tasks.celery_bound.delay("b").get()
    assert decorated_tasks.celery_bound.delay("b").get() == "rebuilt b"
    assert decorated_tasks.runs == [
        "celery main",
        "celery-bound b tests.django.decorated_tasks.celery_bound",
    ]


def test_a_tasks_hold_names_the_task_it_runs_in_and_its_renewal() -> None:
    """The admin shows a task's hold with its task: Celery's name and id, or a Django task's
    (``takes_context=True``) module path and id; @redis_lock renews by default, every third
    of its timeout."""
    result = decorated_tasks.celery_seen.delay("a")
    celery = result.get()
    assert celery["celery_task"] == "tests.django.decorated_tasks.celery_seen"
    assert celery["celery_task_id"] == result.id
    assert celery["label"] == "tests.django.decorated_tasks.celery_seen"
    assert celery["renew"] == 3.3
    django_result = decorated_tasks.django_seen.enqueue("a")
    django_task = django_result.return_value
    assert django_task["django_task"] == "tests.django.decorated_tasks.django_seen"
    assert django_task["django_task_id"] == str(django_result.id)
    assert "celery_task" not in django_task and django_task["renew"] == 3.3
    held = Lock("plain-call", timeout=5)
    with held:
        hold = get_lock("plain-call")
        assert hold is not None and not {"celery_task", "django_task", "renew"} & set(hold.metadata)


def test_task_objects_are_refused_with_the_right_order_in_the_message() -> None:
    with pytest.raises(TypeError, match="put @task above @redis_lock"):
        redis_lock("x")(decorated_tasks.rebuild)  # type: ignore[type-var]
    with pytest.raises(TypeError, match="@shared_task"):
        redis_lock("x")(decorated_tasks.celery_rebuild)


# -- signals ----------------------------------------------------------------------------------
def test_signals_for_acquired_released_contended_and_lost(redis_client) -> None:
    received: list[tuple[str, dict[str, Any]]] = []

    def receiver(signal_name: str) -> Any:
        def receive(sender: Any, **kwargs: Any) -> None:
            received.append((signal_name, kwargs))

        return receive

    receivers = {
        "acquired": receiver("acquired"),
        "released": receiver("released"),
        "contended": receiver("contended"),
        "lost": receiver("lost"),
    }
    signals = {
        "acquired": hold_acquired,
        "released": hold_released,
        "contended": hold_contended,
        "lost": hold_lost,
    }
    for name, signal in signals.items():
        signal.connect(receivers[name])
    try:

        @redis_lock("signalled", on_contention="skip")
        def job(outer: bool = True) -> None:
            if outer:  # contended: another thread calls while this call holds it
                other = threading.Thread(target=job, args=(False,))
                other.start()
                other.join()

        job()
        lock = Lock("renewed-signal", timeout=0.6, auto_renew=True)
        lock.acquire()
        hold = lock._current_hold()
        assert hold is not None
        redis_client.delete(hold.keys.lock)
        wait_until(lambda: received[-1][0] == "lost", timeout=5, what="the lost signal")
    finally:
        for name, signal in signals.items():
            signal.disconnect(receivers[name])
    kinds = [name for name, _ in received]
    assert kinds == ["acquired", "contended", "released", "acquired", "lost"]
    acquired = received[0][1]
    assert acquired["kind"] == "lock" and acquired["name"] == "signalled"
    assert len(acquired["holder_id"]) == 16 and acquired["fence"] > 0
    assert acquired["label"].endswith("job")
    assert received[1][1]["holder_id"] is None and received[1][1]["retry_after"] > 0
    assert received[2][1]["holder_id"] == acquired["holder_id"]
    assert received[4][1]["reason"]
    # the timings and the bounded name of the core's Event travel as keyword arguments
    assert acquired["waited"] >= 0 and acquired["held"] is None
    assert acquired["metric_name"] == "signalled"  # the key template
    assert received[1][1]["timed_out"] is False and received[1][1]["waited"] >= 0
    assert received[2][1]["held"] >= 0 and received[4][1]["held"] >= 0


def test_a_timed_out_wait_is_sent_as_hold_contended_with_timed_out() -> None:
    received: list[dict[str, Any]] = []

    def receive(sender: Any, **kwargs: Any) -> None:
        received.append(kwargs)

    hold_contended.connect(receive)
    try:
        holder = Lock("waited-out", timeout=10)
        assert holder.acquire()
        assert not Lock("waited-out", timeout=10).acquire(timeout=0.2)
        holder.release()
    finally:
        hold_contended.disconnect(receive)
    assert [r["timed_out"] for r in received] == [True]
    assert received[0]["waited"] >= 0.2


def test_the_metric_name_is_the_key_template_unless_given() -> None:
    with capture_holds() as captured:

        @redis_lock("order:{order_id}")
        def charge(order_id: int) -> None:
            pass

        @redis_lock("order:{order_id}", metric_name="orders")
        def refund(order_id: int) -> None:
            pass

        @redis_lock(lambda order_id: f"ship:{order_id}")
        def ship(order_id: int) -> None:
            pass

        charge(1)
        charge(2)
        refund(3)
        ship(4)
    names = {e.name: e.metric_name for e in captured.events if e.event == "acquired"}
    assert names["order:1"] == names["order:2"] == "order:{order_id}"
    assert names["order:3"] == "orders"
    assert names["ship:4"] is not None and names["ship:4"].endswith("ship")  # its label
    with pytest.raises(InvalidArgument, match="metric_name"):
        redis_lock("x", metric_name="")

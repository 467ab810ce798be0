"""Views under @redis_lock for the decorator tests, with their URLs (``pytest.mark.urls``)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View

from django_redis_locks import redis_lock
from django_redis_locks.inspection import force_release, get_lock


class Probe:
    """What the views saw: how many were inside at once, and a gate that keeps one inside."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.inside = 0
        self.peak = 0
        self.served = 0
        self.entered = threading.Event()
        self.gate: threading.Event | None = None  # when set: wait for it while inside
        self.names: list[str] = []

    def enter(self) -> None:
        with self.mutex:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
        self.entered.set()

    def leave(self) -> None:
        with self.mutex:
            self.inside -= 1
            self.served += 1


probe = Probe()
async_gate: dict[str, asyncio.Event] = {}


@redis_lock("order:{order_id}", timeout=10)
def charge(request: HttpRequest, order_id: int) -> HttpResponse:
    probe.enter()
    if probe.gate is not None:
        probe.gate.wait(30)
    probe.leave()
    return HttpResponse(f"charged {order_id}")


@redis_lock("queue:{order_id}", timeout=10, blocking=True, blocking_timeout=60)
def charge_in_turn(request: HttpRequest, order_id: int) -> HttpResponse:
    probe.enter()
    time.sleep(0.002)  # the work done under the lock
    probe.leave()
    return HttpResponse(f"charged {order_id}")


@redis_lock("async-order:{order_id}", timeout=10)
async def acharge(request: HttpRequest, order_id: int) -> HttpResponse:
    probe.enter()
    gate = async_gate.get("acharge")
    if gate is not None:
        await gate.wait()
    probe.leave()
    return HttpResponse(f"charged {order_id}")


@redis_lock("report:{request.user.pk}", timeout=10)
def report(request: HttpRequest) -> HttpResponse:
    from django_redis_locks.inspection import list_locks

    probe.names.extend(hold.name for hold in list_locks("report:").items)
    return HttpResponse("report")


@method_decorator(redis_lock("item:{pk}", timeout=10), name="get")
class ItemView(View):
    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        from django_redis_locks.inspection import get_lock

        hold = get_lock(f"item:{pk}")
        probe.names.append("" if hold is None else f"{hold.name} {hold.label}")
        return HttpResponse(f"item {pk}")


@method_decorator(redis_lock("async-item:{pk}", timeout=10), name="get")
class AsyncItemView(View):
    async def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return HttpResponse(f"item {pk}")


# The examples of docs/reference.md, sync and async: the lock name each call runs under is
# recorded (from Redis, during the call) in probe.names.
def _held_now(prefix: str) -> str:
    from django_redis_locks.inspection import list_locks

    return ",".join(hold.name for hold in list_locks(prefix).items)


@redis_lock("report:{request.user.pk}", blocking=True, blocking_timeout=5)
async def build_report(request: HttpRequest) -> HttpResponse:  # async view: stays async
    probe.names.append(_held_now("report:"))
    return HttpResponse("report")


@redis_lock(lambda request: f"export:{request.user.username}")
async def export(request: HttpRequest) -> HttpResponse:  # a callable key reading the user
    probe.names.append(_held_now("export:"))
    return HttpResponse("export")


@redis_lock("invoice:{pk}")
def invoice(request: HttpRequest, pk: int) -> HttpResponse:
    probe.names.append(_held_now("invoice:"))
    return HttpResponse("invoice")


@redis_lock("invoice:{pk}")
async def ainvoice(request: HttpRequest, pk: int) -> HttpResponse:
    probe.names.append(_held_now("invoice:"))
    return HttpResponse("invoice")


@method_decorator(redis_lock("invoice:{pk}"), name="post")
class InvoiceView(View):  # class-based view: URL kwargs are arguments
    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        probe.names.append(_held_now("invoice:"))
        return HttpResponse("invoice")


@method_decorator(redis_lock("invoice:{pk}"), name="post")
class AsyncInvoiceView(View):
    async def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        probe.names.append(_held_now("invoice:"))
        return HttpResponse("invoice")


@method_decorator(redis_lock("user-invoice:{request.user.pk}:{pk}"), name="post")
class AsyncUserInvoiceView(View):
    async def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        probe.names.append(_held_now("user-invoice:"))
        return HttpResponse("invoice")


def _kwargs_view(request: HttpRequest, **kwargs: Any) -> HttpResponse:
    return HttpResponse(",".join(f"{k}={v}" for k, v in sorted(kwargs.items())))


kwargs_view = redis_lock("slug:{slug}", timeout=10)(_kwargs_view)


def evict_own_hold(name: str) -> None:
    """What an operator does from the admin while the view runs: force-release its hold."""
    info = get_lock(name)
    assert info is not None and force_release(name, info.holder_id)


@redis_lock("evicted:{pk}", timeout=10)
def evicted(request: HttpRequest, pk: int) -> HttpResponse:
    evict_own_hold(f"evicted:{pk}")
    return HttpResponse(f"done {pk}")


@redis_lock("evicted:{pk}", timeout=10)
async def aevicted(request: HttpRequest, pk: int) -> HttpResponse:
    await sync_to_async(evict_own_hold)(f"evicted:{pk}")
    return HttpResponse(f"done {pk}")


@redis_lock("evicted:{pk}", timeout=10, on_lost="raise")
def evicted_strict(request: HttpRequest, pk: int) -> HttpResponse:
    evict_own_hold(f"evicted:{pk}")
    return HttpResponse(f"done {pk}")


@redis_lock("refund:{order_id}", timeout=10, retry_after=7)
def refund(request: HttpRequest, order_id: int) -> HttpResponse:
    return HttpResponse(f"refunded {order_id}")


urlpatterns = [
    path("charge/<int:order_id>/", charge),
    path("refund/<int:order_id>/", refund),
    path("evicted/<int:pk>/", evicted),
    path("aevicted/<int:pk>/", aevicted),
    path("evicted-strict/<int:pk>/", evicted_strict),
    path("in-turn/<int:order_id>/", charge_in_turn),
    path("acharge/<int:order_id>/", acharge),
    path("report/", report),
    path("item/<int:pk>/", ItemView.as_view()),
    path("async-item/<int:pk>/", AsyncItemView.as_view()),
    path("slug/<slug:slug>/", kwargs_view),
    path("build-report/", build_report),
    path("export/", export),
    path("invoice/<int:pk>/", invoice),
    path("ainvoice/<int:pk>/", ainvoice),
    path("invoice-view/<int:pk>/", InvoiceView.as_view()),
    path("ainvoice-view/<int:pk>/", AsyncInvoiceView.as_view()),
    path("user-invoice/<int:pk>/", AsyncUserInvoiceView.as_view()),
]

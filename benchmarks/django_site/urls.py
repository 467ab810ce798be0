"""The benchmark's views: the same view undecorated and under ``@redis_lock`` (its defaults,
TTL 30 s), and two yardsticks that run inside the same request handling: two ``PING``s on
the locks alias's client, and a bare ``Lock`` acquire + release (one object, reused)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django_redis import get_redis_connection

from django_redis_locks import Lock, redis_lock

_bare_lock = Lock("bench:bare", using="locks", timeout=30)


def plain(request: HttpRequest, order_id: int) -> HttpResponse:
    return HttpResponse("charged")


@redis_lock("order:{order_id}", timeout=30)
def locked(request: HttpRequest, order_id: int) -> HttpResponse:
    return HttpResponse("charged")


def ping2(request: HttpRequest, order_id: int) -> HttpResponse:
    client = get_redis_connection("locks")
    client.ping()
    client.ping()
    return HttpResponse("charged")


def bare_lock(request: HttpRequest, order_id: int) -> HttpResponse:
    _bare_lock.acquire(blocking=False)
    _bare_lock.release()
    return HttpResponse("charged")


urlpatterns = [
    path("plain/<int:order_id>/", plain),
    path("locked/<int:order_id>/", locked),
    path("ping2/<int:order_id>/", ping2),
    path("lock/<int:order_id>/", bare_lock),
]

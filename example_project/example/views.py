"""Views under ``@redis_lock``: one charge per order at a time, sync or async.

Both views take the lock ``order:<id>``, so a sync and an async request for the same order
exclude each other too. While one is charging, the other gets 409 Conflict with a
``Retry-After`` header (the decorator does that for views).
"""

from __future__ import annotations

import asyncio
import time

from django.http import HttpRequest, HttpResponse, JsonResponse

from django_redis_locks import redis_lock

from .holds import record_hold

#: How long a charge holds its lock: the payment provider call it protects.
CHARGE_SECONDS = 0.3

INDEX = """<!doctype html>
<title>django-redis-locks example</title>
<h1>django-redis-locks example</h1>
<ul>
  <li><a href="/admin/django_redis_locks/livelock/">Live locks and semaphores</a> (admin)</li>
  <li><a href="/orders/1/charge/">/orders/1/charge/</a>: a sync view under
    <code>@redis_lock("order:{order_id}")</code>; reload it quickly for a 409</li>
  <li><a href="/orders/1/acharge/">/orders/1/acharge/</a>: the same as an async view</li>
</ul>
"""


def index(request: HttpRequest) -> HttpResponse:
    return HttpResponse(INDEX)


@redis_lock("order:{order_id}", timeout=10)
def charge(request: HttpRequest, order_id: int) -> HttpResponse:
    """Charge an order; a request for the same order meanwhile gets 409."""
    with record_hold("lock", f"order:{order_id}", by="charge"):
        time.sleep(CHARGE_SECONDS)
    return JsonResponse({"order": order_id, "charged": True, "view": "charge"})


@redis_lock("order:{order_id}", timeout=10)
async def acharge(request: HttpRequest, order_id: int) -> HttpResponse:
    """The same, as an async view."""
    with record_hold("lock", f"order:{order_id}", by="acharge"):
        await asyncio.sleep(CHARGE_SECONDS)
    return JsonResponse({"order": order_id, "charged": True, "view": "acharge"})

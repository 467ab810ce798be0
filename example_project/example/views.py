"""Views showing a lock around a critical section: one charge per order at a time."""

from __future__ import annotations

import time

from django.http import HttpRequest, HttpResponse, JsonResponse

from django_redis_locks import Lock, LockNotAcquired


def charge(request: HttpRequest, order_id: int) -> HttpResponse:
    """Charge an order; a second request for the same order meanwhile gets 409."""
    try:
        with Lock(f"order:{order_id}", timeout=10, blocking=False) as lock:
            time.sleep(0.5)  # the payment provider call this lock protects
            return JsonResponse({"order": order_id, "charged": True, "fence": lock.fence})
    except LockNotAcquired as exc:
        response = JsonResponse({"order": order_id, "error": "already being charged"}, status=409)
        response["Retry-After"] = str(max(1, round(exc.retry_after or 1)))
        return response


async def acharge(request: HttpRequest, order_id: int) -> HttpResponse:
    """The same, as an async view."""
    lock = Lock(f"order:{order_id}", timeout=10, blocking=False)
    if not await lock.aacquire():
        return JsonResponse({"order": order_id, "error": "already being charged"}, status=409)
    try:
        return JsonResponse({"order": order_id, "charged": True, "fence": lock.fence})
    finally:
        await lock.arelease()

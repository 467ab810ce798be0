"""Views under ``@redis_lock``, sync (served by gunicorn's WSGI workers) and async (served by
uvicorn workers through Django's ASGI application). Each runs the critical section for
``?seconds=`` and answers its record as JSON; the lock is named by the URL's ``name``."""

from __future__ import annotations

import asyncio
import os
import time

from django.http import HttpRequest, HttpResponse, JsonResponse

from django_redis_locks import redis_lock
from tests.deploy.project import section
from tests.deploy.project.section import ATTEMPT_TTL, LOCKED_TTL, LOCKED_WAIT, RENEWED_TTL


def _seconds(request: HttpRequest) -> float:
    return float(request.GET.get("seconds", "0"))


def ping(request: HttpRequest) -> HttpResponse:
    """Which worker answered (after ``?seconds=``, so that concurrent pings spread)."""
    time.sleep(_seconds(request))
    return JsonResponse({"pid": os.getpid()})


async def aping(request: HttpRequest) -> HttpResponse:
    await asyncio.sleep(_seconds(request))
    return JsonResponse({"pid": os.getpid()})


@redis_lock("{name}", timeout=LOCKED_TTL, blocking=True, blocking_timeout=LOCKED_WAIT)
def locked(request: HttpRequest, name: str) -> HttpResponse:
    return JsonResponse(section.run(name, _seconds(request), "locked"))


def bare(request: HttpRequest, name: str) -> HttpResponse:
    return JsonResponse(section.run(name, _seconds(request), "bare"))


@redis_lock("{name}", timeout=ATTEMPT_TTL)
def attempt(request: HttpRequest, name: str) -> HttpResponse:
    return JsonResponse(section.run(name, _seconds(request), "attempt"))


@redis_lock("{name}", timeout=RENEWED_TTL)
def renewed(request: HttpRequest, name: str) -> HttpResponse:
    return JsonResponse(section.run(name, _seconds(request), "renewed"))


@redis_lock("{name}", timeout=LOCKED_TTL, blocking=True, blocking_timeout=LOCKED_WAIT)
async def alocked(request: HttpRequest, name: str) -> HttpResponse:
    return JsonResponse(await section.arun(name, _seconds(request), "locked"))


async def abare(request: HttpRequest, name: str) -> HttpResponse:
    return JsonResponse(await section.arun(name, _seconds(request), "bare"))


@redis_lock("{name}", timeout=ATTEMPT_TTL)
async def aattempt(request: HttpRequest, name: str) -> HttpResponse:
    return JsonResponse(await section.arun(name, _seconds(request), "attempt"))


@redis_lock("{name}", timeout=RENEWED_TTL)
async def arenewed(request: HttpRequest, name: str) -> HttpResponse:
    return JsonResponse(await section.arun(name, _seconds(request), "renewed"))

"""The decorated function's type says what a call may return: mypy checks the ``assert_type``
lines below (the ``mypy`` tox env runs on the tests), and pytest runs them, so a skipping
decorator that claimed the function's own return type would fail both."""

from __future__ import annotations

import asyncio
from typing import Any, assert_type

import pytest

from django_redis_locks import SKIPPED, Lock, redis_lock

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _namespace(settings: Any, namespace: str) -> None:
    settings.DJANGO_REDIS_LOCKS = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}


@redis_lock("typed:raise")
def keeps(n: int) -> int:
    return n * 2


@redis_lock("typed:skip", on_contention="skip")
def skips(n: int) -> int:
    return n * 2


@redis_lock("typed:skipped", on_contention="skip", skip_result=SKIPPED)
def skips_with_marker(n: int) -> int:
    return n * 2


@redis_lock("typed:async", on_contention="skip")
async def skips_async(n: int) -> int:
    return n * 2


def test_raise_keeps_the_return_type_and_skip_adds_what_a_skipped_call_returns() -> None:
    assert assert_type(keeps(2), int) == 4
    assert assert_type(skips(2), int | None) == 4
    assert assert_type(skips_with_marker(2), int | str) == 4
    with Lock("typed:skip", timeout=10), Lock("typed:skipped", timeout=10):
        assert assert_type(skips(2), int | None) is None
        assert assert_type(skips_with_marker(2), int | str) == SKIPPED


def test_an_async_function_that_skips_returns_a_coroutine_of_either() -> None:
    async def run() -> tuple[int | None, int | None]:
        ran = await skips_async(3)
        assert_type(ran, int | None)
        async with Lock("typed:async", timeout=10):
            skipped = await skips_async(3)
        return ran, skipped

    assert asyncio.run(run()) == (6, None)

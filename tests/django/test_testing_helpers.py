"""django_redis_locks.testing's helpers as a project's tests use them."""

from __future__ import annotations

import unittest
from typing import Any, ClassVar

import pytest
from django.conf import settings
from django.test import SimpleTestCase, TestCase, override_settings

from django_redis_locks.conf import get_config
from django_redis_locks.testing import isolated_locks

BEFORE = {"CACHE_ALIAS": "locks", "NAMESPACE": "before"}
IN_TEST = {"CACHE_ALIAS": "locks", "NAMESPACE": "class-level", "ON_REDIS_ERROR": "fail_open"}


def test_isolated_locks_on_a_test_function_reads_the_setting_when_the_test_starts() -> None:
    """A decorator is made when its module is imported; the setting it isolates must be the
    one in force when the test runs (a class-level override_settings, a fixture), not the
    one at import: ``ON_REDIS_ERROR`` and the alias used to be silently replaced."""
    seen: list[Any] = []
    with override_settings(DJANGO_REDIS_LOCKS=BEFORE):
        decorator = isolated_locks()  # (at import)

        @decorator
        def a_test() -> None:
            seen.append(settings.DJANGO_REDIS_LOCKS)
            seen.append(get_config().on_redis_error)

    with override_settings(DJANGO_REDIS_LOCKS=IN_TEST):
        a_test()
        a_test()
    (first, policy, second, _) = seen
    assert policy == "fail_open"
    assert first["NAMESPACE"] not in ("before", "class-level")
    assert first["NAMESPACE"] != second["NAMESPACE"]  # a namespace of its own, per run
    assert {k: v for k, v in first.items() if k != "NAMESPACE"} == {
        k: v for k, v in IN_TEST.items() if k != "NAMESPACE"
    }


def test_isolated_locks_on_a_test_case_class_reads_the_class_level_setting() -> None:
    seen: list[Any] = []

    @override_settings(DJANGO_REDIS_LOCKS=IN_TEST)
    @isolated_locks()
    class Case(SimpleTestCase):
        def test_it(self) -> None:
            seen.append(settings.DJANGO_REDIS_LOCKS)

    with override_settings(DJANGO_REDIS_LOCKS=BEFORE):
        result = unittest.TextTestRunner(stream=_Null(), verbosity=0).run(
            unittest.defaultTestLoader.loadTestsFromTestCase(Case)
        )
    assert result.wasSuccessful(), result.errors + result.failures
    [config] = seen
    assert config["ON_REDIS_ERROR"] == "fail_open"
    assert config["NAMESPACE"] not in ("before", "class-level")


CLASS_LEVEL = {
    "CACHE_ALIAS": "default",
    "NAMESPACE": "class-level",
    "ON_REDIS_ERROR": "fail_open",
    "VIEW_CONTENTION_STATUS": 423,
    "VIEW_REDIS_ERROR_STATUS": 502,
}


@pytest.mark.parametrize("case_class", [SimpleTestCase, TestCase])
def test_a_test_method_decorated_with_isolated_locks_sees_the_class_level_override(
    case_class: type[SimpleTestCase],
) -> None:
    """The issue's case: ``@override_settings(DJANGO_REDIS_LOCKS=...)`` on a TestCase class,
    ``@isolated_locks()`` on its test methods (sync and async). Each test sees the class's
    alias, ``ON_REDIS_ERROR`` and statuses, in a namespace of its own."""
    seen: dict[str, Any] = {}

    with override_settings(DJANGO_REDIS_LOCKS=BEFORE):  # in force when the module is imported

        @override_settings(DJANGO_REDIS_LOCKS=CLASS_LEVEL)
        class Case(case_class):  # type: ignore[valid-type,misc]
            databases: ClassVar[set[str]] = set()

            @isolated_locks()
            def test_sync(self) -> None:
                seen["sync"] = get_config()

            @isolated_locks()
            async def test_async(self) -> None:
                seen["async"] = get_config()

    result = unittest.TextTestRunner(stream=_Null(), verbosity=0).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(Case)
    )
    assert result.wasSuccessful(), result.errors + result.failures
    assert sorted(seen) == ["async", "sync"]
    for config in seen.values():
        assert config.cache_alias == "default"
        assert config.on_redis_error == "fail_open"
        assert config.view_contention_status == 423
        assert config.view_redis_error_status == 502
        assert config.namespace not in ("before", "class-level")
    assert seen["sync"].namespace != seen["async"].namespace


class _Null:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

"""Property-based tests of everything a caller can pass: names, timeouts, limits, metadata,
page sizes and ``@redis_lock`` key templates.

For any input the library either accepts it or raises its ``InvalidArgument`` (a
``ValueError``) or ``InvalidArgumentType`` (a ``TypeError``) naming the argument; nothing else
escapes. Accepted names map one to one onto keys inside the namespace: every key of every
kind (lock, queue, waiters; semaphore holders, queue, leases, info) starts with ``<ns>:{``,
its hash tag is the name's CRC-32 bucket whatever the name contains, distinct names (and
kinds) never share a key, and a key is at most :data:`MAX_KEY_BYTES` long (272 bytes with the
default namespace ``drl``; 333 with the longest namespace). Template values of ``@redis_lock``
are encoded one to one into at most 64 characters that cannot add a separator.

No Redis is needed: constructors validate without I/O. Examples are bounded (see
``conftest.py``), so the file runs in a few seconds.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import unicodedata
from collections.abc import Callable
from typing import Any

import pytest
import redis
from hypothesis import example, given
from hypothesis import strategies as st

from django_redis_locks import InvalidArgument, InvalidArgumentType, Lock, Semaphore
from django_redis_locks.core import Backend
from django_redis_locks.core.protocol.holder import (
    MAX_METADATA_BYTES,
    check_holder_id,
    holder_metadata,
    metadata_json,
)
from django_redis_locks.core.protocol.keys import BUCKETS, KeySpace
from django_redis_locks.core.protocol.wake_messages import split_message
from django_redis_locks.core.registry import MAX_PAGE_SIZE, _decode_cursor
from django_redis_locks.core.semaphore import MAX_LIMIT
from django_redis_locks.core.validation import (
    MAX_NAME_BYTES,
    MAX_NAMESPACE_BYTES,
    MAX_TTL_SECONDS,
    MAX_WAIT_SECONDS,
    MIN_TTL_SECONDS,
    check_count,
    check_name,
    check_namespace,
    check_ttl,
    check_wait,
    to_millis,
)
from django_redis_locks.decorators.names import MAX_VALUE_CHARS, Namer, encode_value

#: The longest kind word with its separators: ``<ns>:{255}:lockq:`` is namespace + 13.
_FIXED_PART = len(":{255}:lockq:")
#: Longest key with the default namespace: ``drl:{255}:lockq:`` and a 256-byte name.
MAX_KEY_BYTES = len("drl") + _FIXED_PART + MAX_NAME_BYTES
#: Longest key with any namespace.
MAX_KEY_BYTES_ANY_NAMESPACE = MAX_NAMESPACE_BYTES + _FIXED_PART + MAX_NAME_BYTES

REFUSED = (InvalidArgument, InvalidArgumentType)
_BAD_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}
_KEY = re.compile(r"(?s)drl:\{(\d{1,3})\}:(lock|lockq|lockw|sem|semq|semw|semi):(.*)")

# -- strategies -----------------------------------------------------------------------------
#: Anything at all a caller might pass.
ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.decimals(allow_nan=False),
    st.fractions(),
    st.complex_numbers(),
    st.text(max_size=40),
    st.binary(max_size=40),
    st.lists(st.integers(), max_size=3),
    st.tuples(st.integers()),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.builds(object),
)
#: Text of every kind: control, format and surrogate characters, astral planes, and lengths
#: around the 256-byte limit in 1- to 4-byte characters.
TEXT = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.characters(max_codepoint=0x7F), min_size=240, max_size=270),
    st.text(alphabet=st.characters(min_codepoint=0x800, max_codepoint=0xFFFF), max_size=100),
    st.text(alphabet=st.characters(min_codepoint=0x10000), min_size=55, max_size=70),
    st.text(alphabet="{}:#|~%\\*?[]", max_size=20),
)
NAMES = st.one_of(TEXT, ANYTHING)
VALID_NAMES = TEXT.filter(
    lambda name: (
        0 < len(name.encode("utf-8", "surrogatepass")) <= MAX_NAME_BYTES
        and not any(unicodedata.category(char) in _BAD_CATEGORIES for char in name)
    )
)
SECONDS = st.one_of(
    st.floats(),
    st.integers(),
    st.floats(min_value=0, max_value=1e-2),
    st.floats(min_value=MAX_TTL_SECONDS - 1, max_value=MAX_TTL_SECONDS + 1),
    ANYTHING,
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=30,
)
METADATA = st.one_of(
    st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=6),
    st.dictionaries(st.text(max_size=4), st.text(min_size=3000, max_size=5000), max_size=2),
    st.dictionaries(st.integers() | st.text(max_size=3), st.builds(object), max_size=2),
    ANYTHING,
)

_BACKEND = Backend(redis.Redis(host="127.0.0.1", port=9, socket_connect_timeout=0.1))


def outcome(make: Callable[[], Any], argument: str) -> Any:
    """``make()``'s result, or None when it refused the input with an InvalidArgument(Type)
    naming ``argument``; any other exception fails the test."""
    refused: InvalidArgument | InvalidArgumentType
    try:
        return make()
    except REFUSED as error:
        refused = error
    assert refused.argument == argument, refused
    assert isinstance(refused, ValueError | TypeError)
    return None


def hash_tag(key: str) -> str:
    """The part of ``key`` Redis Cluster hashes: between the first ``{`` and the next ``}``."""
    start = key.find("{")
    end = key.find("}", start + 1)
    assert start >= 0 and end > start + 1, key
    return key[start + 1 : end]


def all_keys(space: KeySpace, name: str) -> dict[str, str]:
    """Every key of lock ``name`` and semaphore ``name``, by kind."""
    lock, sem = space.lock(name), space.semaphore(name)
    return {
        "lock": lock.lock,
        "lockq": lock.queue,
        "lockw": lock.waiters,
        "sem": sem.holders,
        "semq": sem.queue,
        "semw": sem.leases,
        "semi": sem.info,
    }


# -- names ----------------------------------------------------------------------------------
@given(NAMES)
@example("\ud800")
@example("x" * MAX_NAME_BYTES)
@example("x" * (MAX_NAME_BYTES + 1))
@example("é" * (MAX_NAME_BYTES // 2))
@example("a}:{b")
def test_any_name_is_refused_cleanly_or_accepted_as_is(name: object) -> None:
    accepted = outcome(lambda: check_name(name), "name")
    lock = outcome(lambda: Lock(name, client=_BACKEND), "name")  # type: ignore[arg-type]
    semaphore = outcome(lambda: Semaphore(name, 2, client=_BACKEND), "name")  # type: ignore[arg-type]
    assert (accepted is None) == (lock is None) == (semaphore is None)
    if accepted is not None:
        assert accepted is name and lock.name == semaphore.name == name
        assert isinstance(name, str)
        assert 1 <= len(name.encode("utf-8")) <= MAX_NAME_BYTES
        assert not any(unicodedata.category(char) in _BAD_CATEGORIES for char in name)


@given(VALID_NAMES)
@example("a}")
@example("{0}")
@example("}{")
@example("x" * MAX_NAME_BYTES)
def test_every_key_of_a_name_lies_in_the_namespace_under_its_bucket_tag(name: str) -> None:
    space = KeySpace("drl")
    bucket = KeySpace.bucket(name)
    assert 0 <= bucket < BUCKETS
    for kind, key in all_keys(space, name).items():
        match = _KEY.fullmatch(key)
        assert match is not None, key
        assert match.groups() == (str(bucket), kind, name)
        assert key.startswith("drl:{") and hash_tag(key) == str(bucket)
        assert len(key.encode("utf-8")) <= MAX_KEY_BYTES
    registry = space.registry(bucket)
    assert hash_tag(registry.names) == hash_tag(registry.expiry) == str(bucket)
    assert space.lock(name).registry == space.semaphore(name).registry == registry


@given(st.lists(VALID_NAMES, min_size=2, max_size=6, unique=True))
@example(["a", "a}"])
@example(["lock:a", "a"])
@example(["q:a", "a"])
def test_distinct_names_never_share_a_key_of_any_kind(names: list[str]) -> None:
    space = KeySpace("drl")
    keys = [key for name in names for key in all_keys(space, name).values()]
    registry_keys = {k for name in names for k in vars_of(space.registry(space.bucket(name)))}
    assert len(set(keys)) == len(keys) == 7 * len(names)
    assert not set(keys) & registry_keys
    members = [space.lock(n).member for n in names] + [space.semaphore(n).member for n in names]
    assert len(set(members)) == len(members)


def vars_of(registry: Any) -> tuple[str, str]:
    return registry.names, registry.expiry


@given(st.from_regex(r"[A-Za-z0-9_.:-]{1,64}", fullmatch=True), VALID_NAMES)
def test_keys_stay_bounded_and_inside_any_namespace(namespace: str, name: str) -> None:
    space = KeySpace(namespace)
    for key in all_keys(space, name).values():
        assert key.startswith(f"{namespace}:{{{KeySpace.bucket(name)}}}:")
        assert len(key.encode("utf-8")) <= MAX_KEY_BYTES_ANY_NAMESPACE
    assert space.channel == f"{namespace}:wake"


@given(st.one_of(TEXT, ANYTHING))
@example("a{b")
@example("x" * 65)
def test_any_namespace_is_refused_cleanly_or_has_no_brace(namespace: object) -> None:
    accepted = outcome(lambda: check_namespace(namespace), "namespace")
    if accepted is not None:
        assert re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", accepted)


@given(VALID_NAMES, st.text(alphabet="0123456789abcdef", min_size=16, max_size=16))
@example("a#0123456789abcdef|1", "0123456789012345")
def test_a_name_cannot_forge_another_waiters_wake_up(name: str, holder: str) -> None:
    for member in (f"lock:{name}", f"sem:{name}"):
        waiter = f"{member}#{holder}"
        assert split_message(waiter) == (waiter, "")
        assert split_message(f"{waiter}|12") == (waiter, "12")


# -- timeouts, limits, sizes ----------------------------------------------------------------
@given(SECONDS)
@example(MIN_TTL_SECONDS)
@example(MAX_TTL_SECONDS)
@example(math.nextafter(MIN_TTL_SECONDS, 0))
@example(math.nextafter(MAX_TTL_SECONDS, math.inf))
def test_any_ttl_is_refused_cleanly_or_bounded(value: object) -> None:
    lock = outcome(lambda: Lock("x", client=_BACKEND, timeout=value), "timeout")  # type: ignore[arg-type]
    if value is None:  # the backend's default TTL
        assert lock is not None and lock.timeout is None
        return
    ttl = outcome(lambda: check_ttl(value), "timeout")
    assert (ttl is None) == (lock is None)
    if ttl is not None:
        assert math.isfinite(ttl) and MIN_TTL_SECONDS <= ttl <= MAX_TTL_SECONDS
        assert 1 <= to_millis(ttl) <= MAX_TTL_SECONDS * 1000
        assert lock.timeout == ttl


@given(SECONDS)
@example(None)
@example(0)
@example(MAX_WAIT_SECONDS)
def test_any_blocking_timeout_is_refused_cleanly_or_bounded(value: object) -> None:
    make = lambda: Lock("x", client=_BACKEND, blocking_timeout=value)  # type: ignore[arg-type]  # noqa: E731
    lock = outcome(make, "blocking_timeout")
    wait = outcome(lambda: check_wait(value), "blocking_timeout")
    if value is None:
        assert lock is not None and lock.blocking_timeout is None
        return
    assert (wait is None) == (lock is None)
    if wait is not None:
        assert math.isfinite(wait) and 0 <= wait <= MAX_WAIT_SECONDS


@given(st.one_of(st.integers(), st.integers(min_value=-2, max_value=MAX_LIMIT + 2), ANYTHING))
@example(MAX_LIMIT)
@example(MAX_LIMIT + 1)
@example(True)
def test_any_semaphore_limit_is_refused_cleanly_or_bounded(limit: object) -> None:
    semaphore = outcome(lambda: Semaphore("x", limit, client=_BACKEND), "limit")  # type: ignore[arg-type]
    if semaphore is not None:
        assert type(limit) is int and 1 <= limit <= MAX_LIMIT == 10_000
        assert semaphore.limit == limit


@given(st.one_of(st.integers(), ANYTHING))
@example(MAX_PAGE_SIZE)
@example(MAX_PAGE_SIZE + 1)
def test_any_page_size_is_refused_cleanly_or_bounded(count: object) -> None:
    accepted = outcome(lambda: check_count(count, MAX_PAGE_SIZE), "count")
    if accepted is not None:
        assert type(count) is int and 1 <= count <= MAX_PAGE_SIZE == 1000


@given(st.one_of(st.text(max_size=80), ANYTHING))
def test_any_cursor_is_refused_cleanly_or_names_a_bucket(cursor: object) -> None:
    decoded = outcome(lambda: _decode_cursor(cursor), "cursor")
    if decoded is not None and cursor is not None:
        bucket, name = decoded
        assert 0 <= bucket < BUCKETS
        assert name is not None and 0 < len(name.encode()) <= MAX_NAME_BYTES


@given(st.one_of(st.text(max_size=20), ANYTHING))
def test_any_holder_id_is_refused_cleanly_or_is_16_hex_digits(holder: object) -> None:
    accepted = outcome(lambda: check_holder_id(holder), "holder_id")
    if accepted is not None:
        assert re.fullmatch(r"[0-9a-f]{16}", accepted)


@given(METADATA)
@example({"label": "<script>alert(1)</script>"})
@example({"host": "forged", "pid": -1})
@example({"deep": json.loads("[" * 50 + "]" * 50)})
def test_any_metadata_is_refused_cleanly_or_stored_as_bounded_json(metadata: object) -> None:
    lock = outcome(lambda: Lock("x", client=_BACKEND, metadata=metadata), "metadata")  # type: ignore[arg-type]
    if lock is None:
        return
    extra = metadata_json(lock.metadata)
    assert len(extra.encode("utf-8")) <= MAX_METADATA_BYTES
    stored = json.loads(holder_metadata(object(), extra))  # an owner that is not a task
    assert isinstance(stored, dict)
    assert {"host", "pid", "thread"} <= stored.keys()


def test_metadata_nested_too_deep_to_encode_is_refused_as_invalid() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(InvalidArgument) as info:
        Lock("x", client=_BACKEND, metadata={"deep": deep})
    assert info.value.argument == "metadata"


# -- @redis_lock key templates --------------------------------------------------------------
TEMPLATE_VALUES = st.one_of(
    TEXT, st.integers(), st.floats(), st.none(), st.booleans(), st.binary(max_size=20)
)
_ENCODED = re.compile(
    r"[A-Za-z0-9\-._@+=,!%]{0,64}|~[0-9a-f]{40}|~none|~true|~false"
    r"|~b[A-Za-z0-9\-._@+=,!%]{0,62}|~b[0-9a-f]{40}"
)
_LONG = "x" * 100
_DIGEST_OF_LONG = encode_value(_LONG)


@given(TEMPLATE_VALUES)
@example("\ud800")
@example("~" + "0" * 40)
@example(_DIGEST_OF_LONG)
def test_any_template_value_encodes_to_a_bounded_token_without_separators(value: object) -> None:
    encoded = encode_value(value)
    assert _ENCODED.fullmatch(encoded), encoded
    assert len(encoded) <= MAX_VALUE_CHARS
    check_name(f"x:{encoded}")


@given(st.lists(TEMPLATE_VALUES, min_size=2, max_size=6, unique_by=str))
@example([_LONG, _DIGEST_OF_LONG])
@example(["~", "%7E"])
@example(["\ud800", "\udc00"])
@example([None, "None", "~none", True, "True", b"ab", "b'ab'", "~bab"])
def test_distinct_template_values_never_share_a_lock_name(values: list[object]) -> None:
    encoded = [encode_value(value) for value in values]
    assert len(set(encoded)) == len(encoded), dict(zip(encoded, values, strict=True))


def _charge(request: object, order_id: object, page: object = 1) -> None:
    """A view-like function for the templates."""


@given(TEMPLATE_VALUES, TEMPLATE_VALUES, TEMPLATE_VALUES, TEMPLATE_VALUES)
@example("1:2", "3", "1", "2:3")
@example(_LONG, 1, _DIGEST_OF_LONG, 1)
def test_a_template_names_distinct_calls_distinctly_within_the_name_limit(
    first: object, page: object, second: object, other_page: object
) -> None:
    namer = Namer("order:{order_id}:page:{page}", [inspect.signature(_charge)], "_charge")
    name = namer.name((None, first, page), {})
    other = namer.name((None, second, other_page), {})
    check_name(name)
    assert name.startswith("order:") and name.count(":") == 3
    assert len(name.encode()) <= len("order::page:") + 2 * MAX_VALUE_CHARS
    if (str(first), str(page)) != (str(second), str(other_page)):
        assert name != other


def test_a_value_shaped_like_a_digest_cannot_take_another_values_lock() -> None:
    """Regression: "~" was left as is, so the 41 characters of a long value's digest, passed as
    a value, named the same lock as that long value (a caller who knows or guesses a long
    value could hold its lock)."""
    assert _DIGEST_OF_LONG.startswith("~")
    assert encode_value(_DIGEST_OF_LONG) == "%7E" + _DIGEST_OF_LONG[1:]
    assert encode_value(_DIGEST_OF_LONG) != _DIGEST_OF_LONG


def test_a_lone_surrogate_in_a_template_value_is_encoded_not_raised() -> None:
    """Regression: a lone surrogate (e.g. from JSON "\\ud800") raised UnicodeEncodeError."""
    assert encode_value("\ud800") == "%ED%A0%80"
    assert encode_value("a\udc00" * 40).startswith("~")


def _general_name(namer: Namer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The name by the general path (Signature.bind and string.Formatter), for comparison."""
    compiled, namer._compiled = namer._compiled, None
    try:
        return namer.name(args, kwargs)
    finally:
        namer._compiled = compiled


@given(
    TEMPLATE_VALUES,
    TEMPLATE_VALUES,
    st.sampled_from(["positional", "keyword", "default"]),
)
def test_the_compiled_template_names_every_call_as_the_general_path_does(
    order_id: object, page: object, how: str
) -> None:
    namer = Namer("order:{order_id}:page:{page}", [inspect.signature(_charge)], "_charge")
    assert namer._compiled is not None  # plain parameter names: compiled
    args: tuple[Any, ...] = (None, order_id, page)
    kwargs: dict[str, Any] = {}
    if how == "keyword":
        args, kwargs = (None,), {"order_id": order_id, "page": page}
    elif how == "default":
        args = (None, order_id)
    assert namer.name(args, kwargs) == _general_name(namer, args, kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((None,), {}),  # order_id missing
        ((None, 1, 2, 3), {}),  # one too many
        ((None, 1), {"order_id": 2}),  # given twice
        ((None, 1), {"nope": 2}),  # no such parameter
    ],
)
def test_a_call_whose_arguments_do_not_fit_is_refused_on_the_compiled_path_too(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    namer = Namer("order:{order_id}:page:{page}", [inspect.signature(_charge)], "_charge")
    with pytest.raises(InvalidArgumentType, match="was not run"):
        namer.name(args, kwargs)

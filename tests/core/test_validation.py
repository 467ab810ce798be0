"""Bad input raises a clear ValueError/TypeError naming the argument, and writes nothing."""

from __future__ import annotations

import math
import re

import pytest

from django_redis_locks import InvalidArgument, InvalidArgumentType, Lock, LockError
from django_redis_locks.core import Backend
from django_redis_locks.core.protocol.keys import BUCKETS, KeySpace
from django_redis_locks.core.validation import MAX_NAME_BYTES

BAD_NAMES = [
    ("", InvalidArgument, "empty"),
    ("x" * (MAX_NAME_BYTES + 1), InvalidArgument, "bytes"),
    ("é" * (MAX_NAME_BYTES // 2 + 1), InvalidArgument, "bytes"),
    ("nul\x00byte", InvalidArgument, "U+0000"),
    ("new\nline", InvalidArgument, "U+000A"),
    ("tab\there", InvalidArgument, "U+0009"),
    ("bidi\u202eoverride", InvalidArgument, "U+202E"),
    ("\ud800", InvalidArgument, "surrogate"),
    (b"bytes", InvalidArgumentType, "str"),
    (42, InvalidArgumentType, "str"),
    (None, InvalidArgumentType, "str"),
]

BAD_TIMEOUTS = [
    (0, InvalidArgument),
    (-1, InvalidArgument),
    (0.0001, InvalidArgument),
    (math.nan, InvalidArgument),
    (math.inf, InvalidArgument),
    (-math.inf, InvalidArgument),
    (10**12, InvalidArgument),
    (True, InvalidArgumentType),
    (False, InvalidArgumentType),
    ("10", InvalidArgumentType),
    ([1], InvalidArgumentType),
]


@pytest.fixture
def keys_before(backend: Backend, redis_client):
    pattern = f"{backend.keys.namespace}:*"
    before = sorted(redis_client.scan_iter(match=pattern))
    yield
    assert sorted(redis_client.scan_iter(match=pattern)) == before, "bad input wrote to Redis"


@pytest.mark.parametrize(("name", "error", "words"), BAD_NAMES)
def test_bad_names(backend: Backend, keys_before, name, error, words) -> None:
    with pytest.raises(error, match=re.escape(words)) as info:
        Lock(name, client=backend)
    assert info.value.argument == "name"
    assert "name" in str(info.value)
    assert isinstance(info.value, LockError)


@pytest.mark.parametrize(("timeout", "error"), BAD_TIMEOUTS)
def test_bad_timeouts(backend: Backend, keys_before, timeout, error) -> None:
    with pytest.raises(error) as info:
        Lock("ok", client=backend, timeout=timeout)
    assert info.value.argument == "timeout"


@pytest.mark.parametrize(
    ("wait", "error"),
    [
        (-0.1, InvalidArgument),
        (math.nan, InvalidArgument),
        (math.inf, InvalidArgument),
        (True, InvalidArgumentType),
        ("1", InvalidArgumentType),
    ],
)
def test_bad_blocking_timeouts(backend: Backend, keys_before, wait, error) -> None:
    with pytest.raises(error, match="blocking_timeout"):
        Lock("ok", client=backend, blocking_timeout=wait)
    lock = Lock("ok", client=backend)
    with pytest.raises(error, match="timeout"):
        lock.acquire(timeout=wait)


def test_timeout_with_non_blocking_acquire_is_refused(backend: Backend, keys_before) -> None:
    with pytest.raises(InvalidArgument, match="blocking=False"):
        Lock("ok", client=backend).acquire(blocking=False, timeout=1)


@pytest.mark.parametrize("seconds", [0, -5, math.nan, math.inf, True, "5", 10**12])
def test_bad_extensions_write_nothing(backend: Backend, redis_client, seconds) -> None:
    lock = Lock("ext", client=backend, timeout=5)
    lock.acquire()
    key = lock._keys_for(backend).lock
    before = redis_client.hgetall(key), redis_client.pttl(key)
    with pytest.raises((InvalidArgument, InvalidArgumentType), match="seconds"):
        lock.extend(seconds)
    assert redis_client.hgetall(key) == before[0]
    assert redis_client.pttl(key) <= before[1]
    lock.release()


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"blocking": "yes"}, "blocking"),
        ({"auto_renew": 1}, "auto_renew"),
        ({"metadata": ["not", "a", "mapping"]}, "metadata"),
        ({"metadata": {"x": object()}}, None),
        ({"metadata": {1: "int key"}}, "metadata"),
        ({"metadata": {"big": "x" * 5000}}, "metadata"),
        ({"on_lost": "not callable"}, "on_lost"),
        ({"using": 3}, "using"),
        ({"slice_seconds": -0.001}, "slice_seconds"),
        ({"slice_seconds": 1.5}, "slice_seconds"),
        ({"slice_seconds": math.nan}, "slice_seconds"),
        ({"slice_seconds": True}, "slice_seconds"),
        ({"slice_seconds": "5ms"}, "slice_seconds"),
    ],
)
def test_other_bad_arguments(backend: Backend, kwargs, argument) -> None:
    if argument is None:  # object() is stored through str(): accepted
        Lock("ok", client=backend, **kwargs)
        return
    with pytest.raises((InvalidArgument, InvalidArgumentType)) as info:
        Lock("ok", client=backend, **kwargs)
    assert getattr(info.value, "argument", None) == argument


def test_accepted_edges(backend: Backend) -> None:
    assert Lock("x" * MAX_NAME_BYTES, client=backend, timeout=0.001).name
    assert Lock("名前:{user}:ü", client=backend, timeout=365 * 24 * 3600).name


def test_keys_are_one_to_one_and_bounded() -> None:
    space = KeySpace("drl")
    names = ["a", "a}", "{a", "a:lock", "lock:a", "a" * MAX_NAME_BYTES, "名", "x}:fence:y"]
    all_keys = [space.lock(n) for n in names]
    flat = [k for keys in all_keys for k in (keys.lock, keys.queue, keys.waiters)]
    assert len(set(flat)) == len(flat)
    for keys in all_keys:
        for key in (keys.lock, keys.queue, keys.waiters):
            assert key.startswith("drl:{")
            assert len(key.encode()) <= len("drl:{255}:fence:") + MAX_NAME_BYTES
    assert all(0 <= KeySpace.bucket(n) < BUCKETS for n in names)


@pytest.mark.parametrize("namespace", ["", "has space", "brace{", "x" * 65, 5])
def test_bad_namespaces(namespace) -> None:
    with pytest.raises((InvalidArgument, InvalidArgumentType), match="namespace"):
        KeySpace(namespace)


def test_client_must_be_a_redis_client() -> None:
    with pytest.raises(InvalidArgumentType, match="client"):
        Lock("x", client="redis://localhost")

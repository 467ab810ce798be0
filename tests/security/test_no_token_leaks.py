"""Tokens never leave the process that holds them; what holders store is shown escaped.

A hold's token is its proof of ownership: whoever knows it can release or extend the hold.
The scenario runs every kind of cycle (acquire, contend, wait and be handed the hold, release,
extend, auto-renew, lose by expiry, by deletion and by an unreachable server, force-release
from the inspection API, the admin and the CLI, the decorator, a semaphore-limited command),
sync and asyncio, for locks and semaphores, with every ``django_redis_locks`` logger at DEBUG
and a receiver on every signal. Every token the library made is recorded; none of them, nor
any 12 characters of one, appears in a log record, a signal's arguments, an exception, an
admin page or the CLI's output (table, details and JSON).

Metadata with markup or terminal control sequences is escaped: HTML-escaped on the list and
confirmation pages of locks and semaphores, and shown as ``\\x1b``... by the CLI.
"""

from __future__ import annotations

import asyncio
import io
import logging
import re
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
import redis
from django.core.management import call_command, load_command_class
from django.core.management.base import CommandError
from django.test import Client, override_settings

from django_redis_locks import (
    Lock,
    LockAlreadyHeld,
    LockBackendError,
    LockError,
    LockLost,
    LockNotAcquired,
    Semaphore,
    redis_lock,
)
from django_redis_locks import signals as drl_signals
from django_redis_locks.core import primitive as primitive_module
from django_redis_locks.core.protocol import holder as holder_module
from django_redis_locks.inspection import force_release, list_semaphores
from tests.harness.servers import RedisServer, wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.django.admin_urls")]

LIST = "/admin/django_redis_locks/livelock/"
RELEASE = "/admin/django_redis_locks/livelock/release/"
#: Shortest piece of a token that counts as a leak (tokens are 27 characters).
PIECE = 12
SIGNALS = {
    "hold_acquired": drl_signals.hold_acquired,
    "hold_released": drl_signals.hold_released,
    "hold_contended": drl_signals.hold_contended,
    "hold_lost": drl_signals.hold_lost,
    "hold_force_released": drl_signals.hold_force_released,
}
MARKUP = "<script>alert('x')</script>"
TERMINAL = "\x1b]0;pwned\x07\x1b[2J\u202eevil"


class Seen:
    """Everything the scenario could leak through, as text."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.texts: list[tuple[str, str]] = []
        self.signals: list[str] = []

    def add(self, where: str, text: object) -> None:
        self.texts.append((where, str(text)))

    def error(self, where: str, error: BaseException) -> None:
        self.add(where, "".join(traceback.format_exception(error)))

    def leaks(self) -> list[str]:
        pieces = {token[i : i + PIECE] for token in self.tokens for i in range(len(token) - PIECE)}
        pattern = re.compile("|".join(map(re.escape, pieces)))
        return [f"{where}: {text[:300]!r}" for where, text in self.texts if pattern.search(text)]


@pytest.fixture
def seen(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, namespace: str
) -> Iterator[Seen]:
    seen = Seen()
    make = holder_module.new_token

    def recorded() -> str:
        token = make()
        seen.tokens.append(token)
        return token

    monkeypatch.setattr(primitive_module, "new_token", recorded)

    def receiver(signal: str) -> Callable[..., None]:
        def receive(sender: Any, **kwargs: Any) -> None:
            seen.signals.append(signal)
            seen.add(f"signal {signal}", repr(kwargs))

        return receive

    receivers = {name: receiver(name) for name in SIGNALS}
    for name, signal in SIGNALS.items():
        signal.connect(receivers[name], weak=False)
    caplog.set_level(logging.DEBUG, logger="django_redis_locks")
    config = {"CACHE_ALIAS": "locks", "NAMESPACE": namespace}
    try:
        with override_settings(DJANGO_REDIS_LOCKS=config):
            yield seen
    finally:
        for name, signal in SIGNALS.items():
            signal.disconnect(receivers[name])
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    for record in caplog.records:
        seen.add(f"log {record.name}", formatter.format(record))
        seen.add(f"log args {record.name}", repr(record.args))


def cli(seen: Seen, *args: str) -> str:
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        call_command("redis_locks", *args, stdout=stdout, stderr=stderr)
    except CommandError as error:
        seen.error(f"cli {args}", error)
    seen.add(f"cli {args}", stdout.getvalue() + stderr.getvalue())
    return stdout.getvalue()


def page(seen: Seen, client: Client, url: str, **data: str) -> str:
    response = client.post(url, data, follow=True) if data else client.get(url)
    html = response.content.decode()
    seen.add(f"admin {url}", html)
    return html


def expect(
    seen: Seen, where: str, action: Callable[[], object], *errors: type[BaseException]
) -> None:
    """Run ``action``; record what it returns or raises (one of ``errors``)."""
    try:
        seen.add(where, repr(action()))
    except errors as error:
        seen.error(where, error)


def test_no_token_reaches_logs_signals_errors_the_admin_or_the_cli(
    seen: Seen, admin_client: Client, make_server: Callable[..., RedisServer]
) -> None:
    meta = {"label": "checkout", "request": "POST /orders/7/charge"}
    # -- locks: acquire, contend, hand over, extend, release ---------------------------------
    holder = Lock("orders:7", timeout=5, metadata=meta)
    assert holder.acquire()
    seen.add("repr", repr(holder))
    holder.extend(5)
    expect(seen, "contended", lambda: Lock("orders:7").acquire(blocking=False))
    with pytest.raises(LockNotAcquired) as contended, Lock("orders:7", blocking=False):
        pass
    seen.error("contended with", contended.value)
    handed: list[bool] = []
    waiter = threading.Thread(
        target=lambda: handed.append(Lock("orders:7", timeout=5).acquire(timeout=10))
    )
    waiter.start()
    time.sleep(0.3)
    page(seen, admin_client, LIST)
    page(seen, admin_client, f"{LIST}?{urlencode({'q': 'orders'})}")
    cli(seen, "list")
    cli(seen, "list", "--json")
    cli(seen, "show", "orders:7")
    cli(seen, "show", "orders:7", "--json")
    holder.release()
    waiter.join(10)
    assert handed == [True]  # its hold is left to expire: a thread that ended holding it

    # -- lose: by expiry, by deletion under the renewer, force-released 3 ways ---------------
    short = Lock("short", timeout=0.2)
    assert short.acquire()
    time.sleep(0.3)
    expect(seen, "expired", short.ensure_held, LockLost)
    lost: list[str] = []
    renewed = Lock("renewed", timeout=0.6, auto_renew=True, on_lost=lambda _, r: lost.append(r))
    assert renewed.acquire()
    time.sleep(0.5)  # renewed at least once
    admin = redis.Redis.from_url(_unrestricted(), socket_timeout=5)
    admin.delete(renewed._keys_for(renewed.backend).lock)
    wait_until(lambda: bool(lost), timeout=5, what="the renewer to find the hold gone")
    expect(seen, "deleted", renewed.release, LockLost)

    api = Lock("by-api", timeout=30, metadata=meta)
    assert api.acquire()
    assert force_release("by-api", _hid(api), by="tests")
    expect(seen, "forced api", api.ensure_held, LockLost)

    by_admin = Lock("by-admin", timeout=30, metadata={"label": MARKUP, "request": MARKUP})
    assert by_admin.acquire()
    query = {"kind": "lock", "name": "by-admin", "holder": _hid(by_admin)}
    page(seen, admin_client, f"{RELEASE}?{urlencode(query)}")
    page(seen, admin_client, RELEASE, **query)
    expect(seen, "forced admin", by_admin.ensure_held, LockLost)

    by_cli = Lock("by-cli", timeout=30, metadata={"label": TERMINAL})
    assert by_cli.acquire()
    cli(seen, "release", "by-cli", "--yes")
    expect(seen, "forced cli", by_cli.release, LockLost)

    # -- semaphores ------------------------------------------------------------------------
    first = Semaphore("imports", 2, timeout=5, metadata=meta)
    second = Semaphore("imports", 2, timeout=5, metadata={"label": MARKUP})
    threads = [threading.Thread(target=s.acquire) for s in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    with pytest.raises(LockNotAcquired) as full, Semaphore("imports", 2, blocking=False):
        pass
    seen.error("semaphore full", full.value)
    page(seen, admin_client, f"{LIST}?kind=semaphore")
    cli(seen, "list", "--kind", "semaphore")
    cli(seen, "show", "imports", "--json")
    [info] = list_semaphores().items
    seen.add("listing", repr(info))
    for holder_info in info.holders:
        query = {"kind": "semaphore", "name": "imports", "holder": holder_info.holder_id}
        page(seen, admin_client, f"{RELEASE}?{urlencode(query)}")
    page(seen, admin_client, RELEASE, **query)
    cli(seen, "release", "imports", "--yes", "--kind", "semaphore")
    slot = Semaphore("slot", 1, timeout=0.6, auto_renew=True)
    with slot:
        time.sleep(0.5)
        seen.add("refresh", slot.refresh())
    short_slot = Semaphore("short-slot", 1, timeout=0.2)
    assert short_slot.acquire()
    time.sleep(0.3)
    expect(seen, "slot expired", short_slot.release, LockLost)

    # -- asyncio -------------------------------------------------------------------------------
    async def in_asyncio() -> None:
        lock = Lock("async", timeout=5)
        async with lock:
            try:
                await Lock("async", timeout=5).aacquire(blocking=False)
            finally:
                await asyncio.sleep(0)
        async with Semaphore("async", 1, timeout=5):
            pass

    asyncio.run(in_asyncio())

    # -- the decorator and a semaphore-limited command -------------------------------------
    @redis_lock("report:{day}", timeout=0.6, on_contention="skip")
    def report(day: str) -> str:
        time.sleep(0.5)  # renewed meanwhile
        other = threading.Thread(target=lambda: seen.add("contended", report(day)))  # skipped
        other.start()
        other.join()
        try:
            report(day)  # nested in this caller: refused, and said so
        except LockAlreadyHeld as error:
            seen.add("nested", str(error))
        return day

    seen.add("decorated", report("monday"))
    command = load_command_class("tests.testapp", "limited")
    stdout, stderr = io.StringIO(), io.StringIO()
    call_command(command, stdout=stdout, stderr=stderr)
    seen.add("command", stdout.getvalue() + stderr.getvalue())

    # -- Redis unreachable -----------------------------------------------------------------
    server = make_server()
    client = redis.Redis.from_url(server.url, socket_timeout=1, socket_connect_timeout=1)
    gone = Lock("gone", client=client, timeout=1, auto_renew=True)
    assert gone.acquire()
    server.stop()
    wait_until(lambda: _given_up(gone), timeout=10, what="the renewer to give up")
    expect(seen, "unreachable", lambda: Lock("gone", client=client).acquire(), LockError)
    with override_settings(CACHES=_caches_on(server)):
        expect(seen, "fail closed", redis_lock("x")(lambda: 1), LockBackendError)
        expect(seen, "admin down", lambda: page(seen, admin_client, LIST))
        cli(seen, "list")
    client.close()

    # -- what was seen -----------------------------------------------------------------------
    assert len(seen.tokens) >= 20
    assert set(seen.signals) == set(SIGNALS)
    assert not seen.leaks(), "\n".join(seen.leaks()[:10])


def test_markup_and_terminal_sequences_in_metadata_are_escaped(
    seen: Seen, admin_client: Client
) -> None:
    nasty = {"label": MARKUP + TERMINAL, "request": MARKUP, "host": MARKUP + TERMINAL}
    lock = Lock("nasty", timeout=30, metadata=nasty)
    assert lock.acquire()
    semaphore = Semaphore("nasty", 2, timeout=30, metadata=nasty)
    assert semaphore.acquire()
    pages = [
        page(seen, admin_client, LIST),
        page(seen, admin_client, f"{LIST}?kind=semaphore"),
        page(seen, admin_client, f"{RELEASE}?kind=lock&name=nasty&holder={_hid(lock)}"),
        page(seen, admin_client, f"{RELEASE}?kind=semaphore&name=nasty&holder={_hid(semaphore)}"),
        page(seen, admin_client, f"{LIST}?q={MARKUP}"),
        page(seen, admin_client, f"{RELEASE}?kind={MARKUP}&name=x&holder=0"),
    ]
    for html in pages:
        assert "<script>alert(" not in html
    assert pages[0].count("&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;") >= 2
    assert "&lt;script&gt;" in pages[2] and "&lt;script&gt;" in pages[3]
    outputs = [
        cli(seen, "list"),
        cli(seen, "show", "nasty"),
        cli(seen, "list", "--json"),
    ]
    stderr = io.StringIO()
    with pytest.raises(CommandError) as refused:
        call_command(
            "redis_locks", "release", "nasty", "--kind", "lock", "--holder", "0" * 16, stderr=stderr
        )
    outputs.append(str(refused.value))
    for output in outputs:
        assert "\x1b" not in output and "\u202e" not in output and "\x07" not in output
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\u202eevil" in outputs[0]
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\u202eevil" in outputs[1]
    lock.release()
    semaphore.release()


def _given_up(primitive: Lock | Semaphore) -> bool:
    hold = primitive._current_hold()
    return hold is None or hold.lost


def _hid(primitive: Lock | Semaphore) -> str:
    holder_id = primitive.holder_id
    assert holder_id is not None
    return holder_id


def _unrestricted() -> str:
    from django.conf import settings

    from tests.harness.acl import unrestricted_url

    url = unrestricted_url(str(settings.CACHES["locks"]["LOCATION"]))
    scheme, _, rest = url.partition("://")  # django-valkey's say valkey:// or valkeys://
    return f"{scheme.replace('valkey', 'redis')}://{rest}"


def _caches_on(server: RedisServer) -> dict[str, Any]:
    from django.conf import settings

    caches = {alias: dict(entry) for alias, entry in settings.CACHES.items()}
    caches["locks"]["LOCATION"] = server.url
    return caches


def test_a_failing_on_lost_callback_logs_no_token(
    redis_server: Any, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The callback thread logs a callback that raised by what it is: a hold's loss report
    named the hold by its repr, token included."""
    import redis

    def on_lost(lock: Any, reason: str) -> None:
        raise ValueError("the user's callback failed")

    caplog.set_level(logging.WARNING)
    with redis.Redis.from_url(redis_server.url, socket_timeout=5) as client:
        name = f"{namespace}:lost"
        lock = Lock(name, client=client, timeout=1, auto_renew=True, on_lost=on_lost)
        assert lock.acquire()
        hold = lock._current_hold()
        assert hold is not None and lock.holder_id is not None
        token = hold.token
        assert token not in repr(hold)
        assert force_release(name, lock.holder_id, client=client)
        wait_until(
            lambda: "the user's callback failed" in caplog.text, timeout=10, what="the callback"
        )
    assert token[:PIECE] not in caplog.text

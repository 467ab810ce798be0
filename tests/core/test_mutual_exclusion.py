"""The coredis example: 64 read-modify-write increments under the lock end exact.

The critical section yields between the read and the write (a short sleep, ``asyncio.sleep``),
so without mutual exclusion increments would be lost.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import redis

from django_redis_locks import Lock
from django_redis_locks.core import Backend
from tests.harness.acl import unrestricted_url


def test_64_threads(backend: Backend, redis_client: redis.Redis) -> None:
    lock = Lock("increment", client=backend, timeout=10)  # one object shared by all threads
    counter = f"{backend.keys.namespace}:counter"
    errors: list[BaseException] = []

    def increment() -> None:
        try:
            with lock:
                value = int(redis_client.get(counter) or 0)
                time.sleep(0.0005)  # widen the race window
                redis_client.set(counter, value + 1)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=increment) for _ in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert redis_client.get(counter) == b"64"


def test_64_asyncio_tasks(redis_server, namespace: str) -> None:
    async def main() -> int:
        client = redis.asyncio.Redis.from_url(redis_server.url, socket_timeout=10)
        # The counter is the test's data, not the library's: its own (unrestricted) client.
        data = redis.asyncio.Redis.from_url(unrestricted_url(redis_server.url), socket_timeout=10)
        backend = Backend(client, namespace=namespace)
        lock = Lock("increment", client=backend, timeout=10)  # shared by all tasks
        counter = f"{namespace}:counter"

        async def increment() -> None:
            async with lock:
                value = int(await data.get(counter) or 0)
                await asyncio.sleep(0)  # let the other tasks run mid-section
                await data.set(counter, value + 1)

        await asyncio.gather(*(increment() for _ in range(64)))
        result = int(await data.get(counter) or -1)
        await client.aclose()
        await data.aclose()
        backend.client.close()
        return result

    assert asyncio.run(main()) == 64


def test_64_increments_from_16_processes(redis_server, namespace: str, redis_client) -> None:
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.core.workers",
                "increment",
                redis_server.url,
                namespace,
                f"{namespace}:counter",
                "4",
            ],
        )
        for _ in range(16)
    ]
    for worker in workers:
        assert worker.wait(timeout=120) == 0
    assert redis_client.get(f"{namespace}:counter") == b"64"

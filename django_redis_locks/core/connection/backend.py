"""A Backend bundles what primitives need to reach Redis: clients, key space and defaults.

It holds a sync redis-py client (used by sync calls and by the background renewer and
wake-up listener) and hands out an asyncio client per running event loop. An asyncio client
made here is closed when its loop shuts down its async generators (``asyncio.run`` and
asgiref's ``async_to_sync`` both do), so per-loop clients do not leak connections.

The Django layer builds one Backend per cache alias; plain Python code passes a client.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from django_redis_locks.core.errors import (
    InvalidArgument,
    InvalidArgumentType,
    LockConfigurationError,
)
from django_redis_locks.core.protocol.keys import KeySpace
from django_redis_locks.core.protocol.scripting import Call, run, run_many, run_many_async
from django_redis_locks.core.runtime.deadlines import ServerClock, request_window
from django_redis_locks.core.runtime.wakeup import WakeupHub, hub_for
from django_redis_locks.core.validation import check_ttl

from .client_settings import address
from .clients import (
    bounded_client,
    derive_async,
    derive_sync,
    is_async_client,
    is_cluster_client,
    is_standard_async_client,
)
from .eviction import awarn_if_evicting, warn_if_evicting
from .interruptions import guard
from .libraries import library_of, node_client

__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_TIMEOUT",
    "Backend",
    "backend_for_client",
    "resolve_backend",
    "set_default_resolver",
]

DEFAULT_NAMESPACE = "drl"
_CLIENT_EXPECTED = (
    "must be a redis-py or valkey-py client (Redis, RedisCluster, Valkey, ValkeyCluster; sync "
    "or asyncio) or a Backend, not {}"
)
DEFAULT_TIMEOUT = 60.0
DEFAULT_REPLICA_WAIT_TIMEOUT = 1.0


class Backend:
    """Clients, key space and defaults shared by every lock and semaphore that uses them.

    ``client``: a redis-py ``Redis`` or ``RedisCluster`` (or valkey-py's ``Valkey`` or
    ``ValkeyCluster``), sync or asyncio. If only one kind
    is given, the other is derived from its connection settings. ``async_client_factory`` is
    called once per event loop to make that loop's asyncio client.

    A plain ``Redis`` (sync or asyncio) is not used as is but through sibling clients with
    the same settings whose calls fail within one socket timeout (see :func:`bounded_client`);
    pass ``bound_retries=False`` to use the client exactly as given.
    """

    def __init__(
        self,
        client: Any,
        *,
        async_client_factory: Callable[[], Any] | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        default_timeout: float = DEFAULT_TIMEOUT,
        replica_wait_timeout: float = DEFAULT_REPLICA_WAIT_TIMEOUT,
        name: str = "",
        bound_retries: bool = True,
    ) -> None:
        default_timeout = check_ttl(default_timeout, "default_timeout")
        replica_wait_timeout = check_ttl(replica_wait_timeout, "replica_wait_timeout")
        keys = KeySpace(namespace)  # (bad arguments fail before a client is made)
        fixed_async = None
        given = client
        if library_of(client) is None or not hasattr(client, "evalsha"):
            raise InvalidArgumentType("client", _CLIENT_EXPECTED.format(type(client).__name__))
        if is_async_client(client):
            if not (bound_retries and is_standard_async_client(client)):
                fixed_async = client
            # else: the asyncio client is a template, copied (bounded) for each event loop
            client = derive_sync(client)
        elif bound_retries:
            client = bounded_client(client)
        self._given = given
        self.client = client
        self.cluster = is_cluster_client(client)
        self.keys = keys
        self.default_timeout = default_timeout
        # A WAIT longer than the socket timeout would end as a socket timeout (a
        # LockBackendError), never as LockNotReplicated: keep it within the clients' own.
        self.replica_wait_timeout = wait_within(replica_wait_timeout, client, fixed_async)
        # How long a request that can grant stays valid (see .deadlines): from the longest
        # socket timeout of the clients known now (None: one without a timeout).
        timeouts = [socket_timeout_of(c) for c in (client, fixed_async) if c is not None]
        longest = None if None in timeouts else max(t for t in timeouts if t is not None)
        self.request_window = request_window(longest)
        self._clocks: dict[str, ServerClock] = {}
        self.name = name or address(client)
        self._fixed_async = fixed_async
        self._async_factory = async_client_factory or (lambda: derive_async(self.client))
        self._per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = (
            weakref.WeakKeyDictionary()
        )
        self._mutex = threading.Lock()
        self.checked_in = 0  # the process that checked the eviction policy (check_eviction)
        if client is not given:
            # Dropped without close(), a Backend still closes the client it made: left to the
            # garbage collector, that client's sockets would be finalized unclosed.
            closer = weakref.finalize(
                self, _close_made_client, client, self.keys.channel, wait=False
            )
            closer.atexit = False  # at exit the process's sockets go anyway

    def __repr__(self) -> str:
        return f"<Backend {self.name} namespace={self.keys.namespace!r}>"

    def check_eviction(self) -> None:
        """After the first call in a process that Redis answered: warn if the server may
        evict keys (see :mod:`.eviction`). The driver calls it while ``checked_in`` is not
        this process; it costs one round trip, once."""
        self.checked_in = os.getpid()
        warn_if_evicting(self.client, self.name)

    async def acheck_eviction(self) -> None:
        """Asyncio twin of :meth:`check_eviction`."""
        self.checked_in = os.getpid()
        await awarn_if_evicting(await self.aclient(), self.name)

    # -- clients ------------------------------------------------------------------------
    async def aclient(self) -> Any:
        """The asyncio client for the running event loop (made on first use)."""
        if self._fixed_async is not None:
            return self._fixed_async
        loop = asyncio.get_running_loop()
        entry = self._per_loop.get(loop)
        if entry is None:
            entry = _LoopClient(self._async_factory())
            with self._mutex:
                self._per_loop[loop] = entry
            await entry.bind(lambda: self._per_loop.pop(loop, None))
        return entry.client

    async def aclose(self) -> None:
        """Close the running loop's asyncio client now (it is re-made on next use)."""
        loop = asyncio.get_running_loop()
        entry = self._per_loop.pop(loop, None)
        if entry is not None:
            await entry.close()

    def close(self) -> None:
        """Stop listening for wake-ups; close the sync client's connections if this Backend
        made that client (a Backend that is garbage-collected does that too)."""
        if self.client is self._given:
            _stop_hub(self.client, self.keys.channel)
        else:
            _close_made_client(self.client, self.keys.channel)

    def node_client(self, key: str) -> Any:
        """A sync client whose pipelines run on the one connection serving ``key``."""
        if self.cluster:
            return node_client(self.client.get_node_from_key(key))
        return self.client

    def run_many(self, calls: Sequence[Call]) -> list[Any]:
        """Run ``calls`` in as few round trips as possible: one pipeline per server (per node
        serving their slots on a Cluster). Errors come back in the list, as exceptions."""
        if not calls:
            return []
        if not self.cluster:
            return run_many(self.client, calls)
        groups: dict[int, tuple[Any, list[int]]] = {}
        for index, call in enumerate(calls):
            node = self.node_client(call.keys[0])
            groups.setdefault(id(node), (node, []))[1].append(index)
        results: list[Any] = [None] * len(calls)
        for node, indexes in groups.values():
            try:
                replies = run_many(node, [calls[i] for i in indexes])
            except Exception as exc:
                replies = [exc] * len(indexes)
            for index, reply in zip(indexes, replies, strict=True):
                results[index] = reply
        for index, reply in enumerate(results):
            if isinstance(reply, Exception):  # a slot may have moved: once more, routed anew
                try:
                    results[index] = run(self.client, calls[index])
                except Exception as exc:
                    results[index] = exc
        return results

    async def arun_many(self, calls: Sequence[Call]) -> list[Any]:
        """Asyncio twin of :meth:`run_many`."""
        if not calls:
            return []
        if self.cluster:  # node pipelines run on the sync client, off the event loop
            return await asyncio.to_thread(self.run_many, calls)
        return await run_many_async(await self.aclient(), calls)

    def command(self, args: tuple[Any, ...], route_key: str) -> Any:
        with guard():  # (see .interruptions)
            if self.cluster:
                node = self.client.get_node_from_key(route_key)
                return self.client.execute_command(*args, target_nodes=node)
            return self.client.execute_command(*args)

    async def acommand(self, args: tuple[Any, ...], route_key: str) -> Any:
        client = await self.aclient()
        if self.cluster:
            await client.initialize()  # (an asyncio cluster client reads its slot map lazily)
            node = client.get_node_from_key(route_key)
            return await client.execute_command(*args, target_nodes=node)
        return await client.execute_command(*args)

    def lane_name(self, key: str) -> str:
        """Which server serves ``key``, for background work that must not wait on another
        server's: the node's address on a Cluster, else "" (one server)."""
        if self.cluster:
            return str(self.client.get_node_from_key(key).name)
        return ""

    def server_clock(self, key: str) -> ServerClock:
        """The clock of the server (Cluster node) serving ``key``, as this process knows it
        (see :mod:`..runtime.deadlines`)."""
        try:
            name = self.lane_name(key)
        except Exception:  # no node known for it right now: the cluster's clock, roughly
            name = ""
        clock = self._clocks.get(name)
        if clock is None:
            clock = self._clocks.setdefault(name, ServerClock())
        return clock

    def hub(self) -> WakeupHub:
        """The process-wide wake-up listener for this backend's server and namespace."""
        return hub_for(self.client, self.keys.channel)


#: How much of a client's socket timeout a WAIT for replicas leaves unused (at most half of
#: it): Redis ends a WAIT up to one server tick (100 ms at the default hz 10) after its
#: timeout, and the reply still has to travel before the client stops reading.
WAIT_MARGIN = 0.25


def socket_timeout_of(client: Any) -> float | None:
    """The socket timeout (seconds) of ``client``'s connections, None if unknown or none."""
    holder = getattr(client, "connection_pool", None)
    if holder is None:  # a cluster client
        holder = getattr(client, "nodes_manager", None)
    settings = getattr(holder, "connection_kwargs", None)
    value = settings.get("socket_timeout") if isinstance(settings, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return None
    return float(value)


def wait_within(seconds: float, *clients: Any) -> float:
    """``seconds``, shortened to :data:`WAIT_MARGIN` (or half) less than the shortest socket
    timeout of ``clients`` (None entries skipped): how long a WAIT may block on them."""
    for client in clients:
        timeout = None if client is None else socket_timeout_of(client)
        if timeout is not None:
            bound = timeout - min(WAIT_MARGIN, timeout / 2)
            seconds = min(seconds, max(round(bound, 3), 0.001))
    return seconds


def _stop_hub(client: Any, channel: str, *, wait: bool = True) -> None:
    hubs: dict[str, WakeupHub] = client.__dict__.get("_drl_wakeup_hubs", {})
    hub = hubs.pop(channel, None)
    if hub is not None:
        hub.stop(wait=wait)


def _close_made_client(client: Any, channel: str, *, wait: bool = True) -> None:
    """Close a sync client a Backend made: on close(), or (``wait=False``: a finalizer must
    not block on the wake-up listener) when the Backend is collected."""
    _stop_hub(client, channel, wait=wait)
    client.close()


class _LoopClient:
    """An asyncio client tied to one event loop, closed when that loop shuts down."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._closer: AsyncGenerator[None, None] | None = None
        self._closed = False

    async def bind(self, forget: Callable[[], object]) -> None:
        # The loop tracks async generators and closes them in shutdown_asyncgens(): that is
        # our hook to close the client before the loop goes away.
        async def closer() -> AsyncGenerator[None, None]:
            try:
                yield
            finally:
                forget()
                await self.close()

        self._closer = closer()
        await self._closer.__anext__()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.client.aclose()


def backend_for_client(client: Any, namespace: str = DEFAULT_NAMESPACE) -> Backend:
    """The Backend for an explicit client, made once per (client, namespace) and kept on it."""
    if library_of(client) is None or not hasattr(client, "__dict__"):
        raise InvalidArgumentType("client", _CLIENT_EXPECTED.format(type(client).__name__))
    with _cache_mutex:
        cache: dict[str, Backend] = client.__dict__.setdefault("_drl_backends", {})
        backend = cache.get(namespace)
        if backend is None:
            backend = cache[namespace] = Backend(client, namespace=namespace)
        return backend


_cache_mutex = threading.Lock()


def _renew_cache_mutex() -> None:
    # A child forked while another thread held the mutex inherits it held, by a thread that
    # does not exist there: it would wait forever on its first backend_for_client().
    global _cache_mutex
    _cache_mutex = threading.Lock()


os.register_at_fork(after_in_child=_renew_cache_mutex)


Resolver = Callable[[str | None], Backend]
_resolver: Resolver | None = None


def set_default_resolver(resolver: Resolver | None) -> None:
    """Install the function that turns ``using=<alias>`` into a Backend (the Django layer's)."""
    global _resolver
    _resolver = resolver


def backend_of(using: str | None, client: Any) -> Backend:
    """The Backend of an introspection call: its ``client=`` (a Backend, or a redis client)
    or its ``using=`` alias (None: the configured default), never both."""
    if using is not None and client is not None:
        raise InvalidArgument("using", "give either using= or client=, not both")
    if client is None:
        return resolve_backend(using)
    return client if isinstance(client, Backend) else backend_for_client(client)


def resolve_backend(using: str | None) -> Backend:
    """The Backend for ``using`` (None: the configured default), from the installed resolver.

    The Django layer installs one (importing ``django_redis_locks`` does, lazily); outside
    Django pass ``client=`` to the primitive instead.
    """
    if _resolver is None:
        raise LockConfigurationError(
            "no Redis client: pass client=<redis client>, or use the Django app "
            "(django_redis_locks in INSTALLED_APPS)"
        )
    return _resolver(using)

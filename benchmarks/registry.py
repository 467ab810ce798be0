"""The implementations under test, by name, behind one small adapter interface.

An implementation is registered with :func:`register` from the module that wraps it
(``benchmarks.ours``, ``benchmarks.peers.*``); :func:`load_all` imports those modules. A
measurement asks for the implementations that can do what it needs (``capabilities``) and
builds one adapter per process with :meth:`Impl.make`.

Semaphores are ``kind == "semaphore"``: the same adapter interface (acquire one slot,
release it), built by :meth:`Impl.make_semaphore` with the limit as a fourth argument
(register them with :func:`semaphore`). The lock measurements only ever select
``kind == "lock"`` or ``"floor"``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import redis

__all__ = [
    "BLOCK",
    "CYCLE",
    "TRY",
    "Impl",
    "LockAdapter",
    "all_impls",
    "get",
    "load_all",
    "register",
    "select",
    "semaphore",
]

#: Capability: one uncontended acquire + release cycle.
CYCLE = "cycle"
#: Capability: a non-blocking try that may fail under contention.
TRY = "try"
#: Capability: a blocking acquire with a timeout.
BLOCK = "block"

#: Modules whose import registers implementations, in display order.
IMPL_MODULES = (
    "benchmarks.ours",
    "benchmarks.peers.redis_py",
    "benchmarks.peers.python_redis_lock",
    "benchmarks.peers.pottery_redlock",
    "benchmarks.peers.book_lua",
    "benchmarks.peers.floors",
    "benchmarks.peers.book_semaphores",
    "benchmarks.peers.zset_semaphore",
)


class LockAdapter(Protocol):
    """One process's handle on one named lock of some implementation."""

    def acquire(self, blocking: bool, timeout: float | None = None) -> bool:
        """Try once (``blocking=False``) or wait up to ``timeout`` seconds; True if taken."""
        ...

    def release(self) -> None:
        """Release the hold taken by the last successful :meth:`acquire`."""
        ...

    def close(self) -> None:
        """Free what the adapter made (clients, threads); the adapter is not used again."""
        ...


#: Builds an adapter: (redis client of this process, lock name, lock TTL in seconds).
Factory = Callable[[redis.Redis, str, float], LockAdapter]
#: Builds a semaphore adapter (acquire and release one slot): (client, semaphore name,
#: holder TTL in seconds, limit).
SemaphoreFactory = Callable[[redis.Redis, str, float, int], LockAdapter]


@dataclass(frozen=True)
class Impl:
    """A registered implementation: how to build it, what it can do, how to describe it."""

    name: str
    label: str
    # "lock" (ours and the peers), "floor" (reference loops), "semaphore", or "bound" (our
    # scripts alone: what a cycle of ours would cost if the library's Python cost nothing)
    kind: str
    factory: Factory
    capabilities: frozenset[str] = field(default_factory=lambda: frozenset({CYCLE, TRY, BLOCK}))
    ours: bool = False
    waits_by: str = ""  # how a blocked acquire waits: "pub/sub", "BLPOP", "sleep 0.1 s", ...
    note: str = ""
    semaphore_factory: SemaphoreFactory | None = None  # kind "semaphore" only
    guarantees: str = ""  # what it does and does not promise (semaphores: clock, fairness)

    def make(self, client: redis.Redis, name: str, ttl: float) -> LockAdapter:
        return self.factory(client, name, ttl)

    def make_semaphore(self, client: redis.Redis, name: str, ttl: float, limit: int) -> LockAdapter:
        """A semaphore adapter with ``limit`` slots; TypeError for a lock or floor."""
        if self.semaphore_factory is None:
            raise TypeError(f"{self.name!r} is a {self.kind}, not a semaphore")
        return self.semaphore_factory(client, name, ttl, limit)

    @property
    def is_peer(self) -> bool:
        return self.kind in ("lock", "semaphore") and not self.ours


_REGISTRY: dict[str, Impl] = {}


def register(impl: Impl) -> Impl:
    """Add ``impl`` to the registry (its name must be new); returns it."""
    if impl.name in _REGISTRY:
        raise ValueError(f"implementation {impl.name!r} is registered twice")
    _REGISTRY[impl.name] = impl
    return impl


def _not_a_lock(client: redis.Redis, name: str, ttl: float) -> LockAdapter:
    raise TypeError(f"{name!r}: a semaphore implementation is built with make_semaphore()")


def semaphore(
    name: str,
    label: str,
    factory: SemaphoreFactory,
    *,
    ours: bool = False,
    waits_by: str = "",
    note: str = "",
    guarantees: str = "",
    kind: str = "semaphore",
) -> Impl:
    """A semaphore implementation (kind ``"semaphore"``, or ``"bound"`` for a reference
    loop of semaphore scripts; cycles and blocking acquires)."""
    return Impl(
        name=name,
        label=label,
        kind=kind,
        factory=_not_a_lock,
        capabilities=frozenset({CYCLE, BLOCK}),
        ours=ours,
        waits_by=waits_by,
        note=note,
        semaphore_factory=factory,
        guarantees=guarantees,
    )


def load_all() -> None:
    """Import every implementation module, registering what it offers (idempotent)."""
    for module in IMPL_MODULES:
        importlib.import_module(module)


def all_impls() -> list[Impl]:
    load_all()
    return list(_REGISTRY.values())


def get(name: str) -> Impl:
    """The implementation called ``name``; KeyError names the known ones."""
    load_all()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no implementation {name!r}; known: {', '.join(_REGISTRY)}") from None


def select(
    capability: str, wanted: Iterable[str] | None = None, kinds: Iterable[str] = ("lock", "floor")
) -> list[Impl]:
    """Registered implementations with ``capability`` and a kind in ``kinds``, in order.

    ``wanted`` (names) narrows the selection; unknown names raise KeyError.
    """
    impls = all_impls()
    if wanted is not None:
        names = list(wanted)
        for name in names:
            get(name)
        impls = [impl for impl in impls if impl.name in names]
    kind_set = set(kinds)
    return [impl for impl in impls if capability in impl.capabilities and impl.kind in kind_set]

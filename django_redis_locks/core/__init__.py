"""The Django-free core: Lock and Semaphore on Redis, their Lua scripts, renewal and wake-ups.

Never imports Django. The module map (each package groups what changes together)::

    lock, semaphore      the public primitives; primitive: what both share (options, the
                         sync and asyncio API, the acquire); holding, its base: the holds
                         per owner, release, checks, events
    handoff              a lock's hold handed from one owner (or process) to another
    registry, info       listings and force-release; the records they return
    events               the one seam for whoever listens: signals, testing, exporters
    errors, validation   the one error hierarchy; argument checks

    protocol/            what travels to Redis, each wire format defined once:
      keys               the key layout (and the waiter and holder records in it)
      constants          numbers the scripts and Python share (pasted into the Lua)
      scripts/*.lua      one atomic script per operation; scripts/lib: shared Lua helpers
      scripting          loading and running scripts (EVALSHA, NOSCRIPT)
      lock_calls,        per script: the call's KEYS/ARGV and the decoded reply
      semaphore_calls
      replies            the decoded replies both primitives share
      wake_messages      the wake-up message (written by lib/lock, lib/semaphore)
      holder             tokens, holder ids and the holder metadata stored with a hold

    runtime/             what runs an operation in a process:
      driver             runs an operation's effects (Eval, Listen, Wait, Detach) sync or async
      acquiring          the acquire loop, written once as a generator of effects
      holds              a hold and its lifecycle; ownership: threads, greenlets, tasks
      renewal            the renewer's lanes: auto-renewal and the undo of unheard grants
      renewal_work       what the renewer sends and what each reply means (no threads)
      deadlines,         acquire deadlines in server time; the client library's resends
      resends
      wakeup, waiters,   the per-process wake-up listener and the waiters it wakes
      subscription
      callbacks          the callback thread (loss listeners, hooks)
      exiting            at interpreter exit, these threads stop before Python finalizes

    connection/          how the core reaches Redis:
      backend            a Backend: clients, key space, defaults, the eviction check
      clients, clusters, the clients built from the one given (bounded siblings, async
      sentinels          twins), per kind of deployment
      libraries          redis-py and valkey-py; client_settings: settings carried over
      eviction           whether the server may evict keys
      interruptions      a pooled connection a Ctrl-C left mid-call is never reused

A blocked ``acquire()`` runs lock/semaphore -> primitive -> runtime.acquiring ->
runtime.driver, which sends the protocol's calls through the connection's Backend and waits
on runtime.wakeup.
"""

from .connection.backend import Backend
from .errors import (
    AlreadyQueued,
    InvalidArgument,
    InvalidArgumentType,
    LockAlreadyHeld,
    LockBackendError,
    LockConfigurationError,
    LockError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    LockNotReplicated,
    SemaphoreFull,
    SemaphoreLimitMismatch,
)
from .handoff import ahand_off, atake_over, hand_off, take_over
from .info import HolderInfo, Page, SemaphoreInfo
from .lock import Lock
from .semaphore import Semaphore

__all__ = [
    "AlreadyQueued",
    "Backend",
    "HolderInfo",
    "InvalidArgument",
    "InvalidArgumentType",
    "Lock",
    "LockAlreadyHeld",
    "LockBackendError",
    "LockConfigurationError",
    "LockError",
    "LockLost",
    "LockNotAcquired",
    "LockNotOwned",
    "LockNotReplicated",
    "Page",
    "Semaphore",
    "SemaphoreFull",
    "SemaphoreInfo",
    "SemaphoreLimitMismatch",
    "ahand_off",
    "atake_over",
    "hand_off",
    "take_over",
]

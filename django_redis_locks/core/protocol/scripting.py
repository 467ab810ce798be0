"""Lua scripts: read once from the package, run with EVALSHA, reloaded on NOSCRIPT.

Each ``.lua`` file under ``scripts/`` is one atomic operation and opens with a header naming
its KEYS, ARGV and reply. Helpers shared by several scripts live in ``scripts/lib/`` and are
pasted in where a script says ``-- @include <name>``: each script is still sent as one text.
Only the helpers (functions and constants) that the script uses are pasted, since Redis
defines every one of them anew on each run. ``@NAME@`` stands for a number of
:data:`.constants.SCRIPT_CONSTANTS`, pasted in too.
Running a script never sends its source unless the server answers
NOSCRIPT (after a restart, ``SCRIPT FLUSH`` or a failover); then the source is loaded and the
call repeated once. The same path works for redis-py's ``Redis``, ``RedisCluster`` and their
asyncio twins, and for pipelines.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from django_redis_locks.core.connection.interruptions import guard
from django_redis_locks.core.connection.libraries import no_script_errors

from .constants import SCRIPT_CONSTANTS

__all__ = ["Call", "Script", "load", "run", "run_async", "run_many", "run_many_async"]

Arg = str | int | float | bytes


@dataclass(frozen=True, slots=True)
class Script:
    """One Lua script: its file name, source and SHA1 digest."""

    name: str
    source: str
    sha: str


@dataclass(frozen=True, slots=True)
class Call:
    """One invocation of a script: the script, its KEYS and its ARGV."""

    script: Script
    keys: Sequence[str]
    args: Sequence[Arg]

    def evalsha_args(self) -> tuple[Any, ...]:
        return (self.script.sha, len(self.keys), *self.keys, *self.args)


_CACHE: dict[str, Script] = {}
#: Every script of the package, by name (``scripts/<name>.lua``).
_NAMES = tuple(
    sorted(
        entry.name.removesuffix(".lua")
        for entry in resources.files(__package__).joinpath("scripts").iterdir()
        if entry.name.endswith(".lua")
    )
)
_INCLUDE = re.compile(r"^-- @include (\w+)$", re.MULTILINE)
_DEFINITION = re.compile(r"^local (?:function )?(\w+)")
_WORD = re.compile(r"\b\w+\b")
_CONSTANT = re.compile(r"@(\w+)@")


def _read(*parts: str) -> str:
    return resources.files(__package__).joinpath("scripts", *parts).read_text("utf-8")


def _definitions(library: str) -> list[tuple[str, str]]:
    """A library's top-level definitions, in order: (name, text with the comment above it).
    The library's header comment (before its first definition) is left out."""
    lines = _read("lib", f"{library}.lua").splitlines()
    starts = []
    for number, line in enumerate(lines):
        found = _DEFINITION.match(line)
        if found:
            first = number
            while first > 0 and lines[first - 1].startswith("--"):
                first -= 1
            starts.append((found[1], first))
    blocks = []
    for index, (defined, first) in enumerate(starts):
        end = starts[index + 1][1] if index + 1 < len(starts) else len(lines)
        blocks.append((defined, "\n".join(lines[first:end]).strip("\n")))
    return blocks


def _expand(source: str, read: dict[str, list[tuple[str, str]]] | None = None) -> str:
    """Paste in the definitions that ``source`` uses, directly or through one another
    (``read``: the libraries' definitions read so far, added to)."""
    read = {} if read is None else read
    for match in _INCLUDE.finditer(source):
        if match[1] not in read:
            read[match[1]] = _definitions(match[1])
    libraries = {match[1]: read[match[1]] for match in _INCLUDE.finditer(source)}
    used = set(_WORD.findall(_INCLUDE.sub("", source)))
    changed = True
    while changed:  # what the used definitions use in turn
        changed = False
        for blocks in libraries.values():
            for defined, text in blocks:
                if defined in used:
                    new = set(_WORD.findall(text)) - used
                    if new:
                        used |= new
                        changed = True

    def paste(match: re.Match[str]) -> str:
        return "\n".join(text for defined, text in libraries[match[1]] if defined in used)

    expanded = _INCLUDE.sub(paste, source)
    return _CONSTANT.sub(lambda match: str(SCRIPT_CONSTANTS[match[1]]), expanded)


def load(name: str) -> Script:
    """Return the script ``scripts/<name>.lua``, read from the package once per process (all
    of them on the first call).

    Each ``-- @include <lib>`` line is replaced by the definitions of ``scripts/lib/<lib>.lua``
    that the script uses, and each ``@NAME@`` by that constant's value.
    """
    script = _CACHE.get(name)
    if script is None:
        # Every script at once, on the first call of the process (an acquire): a release
        # then never reads a file, where a Ctrl-C could land before its script went out. One
        # thread reads them; others that need one meanwhile wait for it (a thousand threads
        # that start together would otherwise each read them all).
        with _LOADING:
            libraries: dict[str, list[tuple[str, str]]] = {}
            for other in (name, *_NAMES):
                if other not in _CACHE:
                    source = _expand(_read(f"{other}.lua"), libraries)
                    digest = hashlib.sha1(source.encode("utf-8"), usedforsecurity=False)
                    _CACHE[other] = Script(other, source, digest.hexdigest())
            script = _CACHE[name]
    return script


def _new_loading_lock() -> None:
    global _LOADING
    _LOADING = threading.Lock()  # (a fork while another thread loaded leaves it held)


_LOADING = threading.Lock()
os.register_at_fork(after_in_child=_new_loading_lock)


def run(client: Any, call: Call) -> Any:
    """Run ``call`` on a synchronous redis-py client; reload the script once on NOSCRIPT.
    An interruption leaves no reply behind for another call (see
    :mod:`..connection.interruptions`)."""
    with guard():
        try:
            return client.evalsha(*call.evalsha_args())
        except no_script_errors():
            client.execute_command("SCRIPT LOAD", call.script.source, **_route(client, call))
            return client.evalsha(*call.evalsha_args())


async def run_async(client: Any, call: Call) -> Any:
    """Run ``call`` on an asyncio redis-py client; reload the script once on NOSCRIPT."""
    try:
        return await client.evalsha(*call.evalsha_args())
    except no_script_errors():
        await client.execute_command("SCRIPT LOAD", call.script.source, **_route(client, call))
        return await client.evalsha(*call.evalsha_args())


def _route(client: Any, call: Call) -> dict[str, Any]:
    """On a Cluster, load a script on the node that runs the call only: a stalled node
    elsewhere must not make it fail (redis-py would send SCRIPT LOAD to every node)."""
    if not call.keys or not hasattr(client, "get_node_from_key"):
        return {}
    return {"target_nodes": client.get_node_from_key(call.keys[0])}


def run_many(
    client: Any, calls: Sequence[Call], *, wait: tuple[int, int] | None = None
) -> list[Any]:
    """Run several calls in one pipeline round trip (one connection, no MULTI).

    ``wait=(replicas, timeout_ms)`` appends ``WAIT`` so that it runs on the same connection
    right after the scripts. Errors come back in the result list, as redis-py exceptions,
    except NOSCRIPT: the missing scripts are loaded and only the calls that did not run are
    repeated (with ``WAIT`` again after them). An interruption leaves no reply behind for
    another call (see :mod:`..connection.interruptions`).
    """
    with guard():
        results = _pipeline(client, calls, wait)
        missing = _missing(calls, results)
        if missing:
            for script in {calls[i].script for i in missing}:
                client.script_load(script.source)
            retried = _pipeline(client, [calls[i] for i in missing], wait)
            results = _merge(results, missing, retried, len(calls))
    return results


def _missing(calls: Sequence[Call], results: list[Any]) -> list[int]:
    return [i for i in range(len(calls)) if isinstance(results[i], no_script_errors())]


def _merge(results: list[Any], missing: list[int], retried: list[Any], n: int) -> list[Any]:
    merged = list(results)
    for position, index in enumerate(missing):
        merged[index] = retried[position]
    if len(retried) > len(missing):  # the WAIT reply of the second round trip wins
        merged[n:] = retried[len(missing) :]
    return merged


def _pipeline(client: Any, calls: Sequence[Call], wait: tuple[int, int] | None) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for call in calls:
        pipe.evalsha(*call.evalsha_args())
    if wait is not None:
        pipe.execute_command("WAIT", *wait)
    return list(pipe.execute(raise_on_error=False))


async def run_many_async(
    client: Any, calls: Sequence[Call], *, wait: tuple[int, int] | None = None
) -> list[Any]:
    """Asyncio twin of :func:`run_many`."""
    results = await _pipeline_async(client, calls, wait)
    missing = _missing(calls, results)
    if missing:
        for script in {calls[i].script for i in missing}:
            await client.script_load(script.source)
        retried = await _pipeline_async(client, [calls[i] for i in missing], wait)
        results = _merge(results, missing, retried, len(calls))
    return results


async def _pipeline_async(
    client: Any, calls: Sequence[Call], wait: tuple[int, int] | None
) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for call in calls:
        pipe.evalsha(*call.evalsha_args())
    if wait is not None:
        pipe.execute_command("WAIT", *wait)
    return list(await pipe.execute(raise_on_error=False))

"""Where Redis's time for an uncontended cycle goes: ``python -m benchmarks.script_split``.

Runs the cycle of item 1 (acquire + release of one ``Lock``, non-blocking) and of item 5 (one
slot of a ``Semaphore`` of 3) on a server of its own, with ``INFO commandstats`` around the
loop: Redis's time for the two scripts (``EVALSHA``) and for the commands they ran (each
``redis.call``, counted under its own name). Then it calibrates, on the same server, with
scripts that do nothing else:

- *starting a script*: an empty script (``return 0``) sent with the keys and arguments of
  each of the cycle's two calls;
- *a call from Lua*: a script that makes 20 calls of ``EXISTS``, less the empty script and
  less the calls' own time, per call (what Redis adds around a command run from a script:
  the arguments made into Redis strings, the reply turned into Lua values).

and splits the scripts' time per cycle into the commands' own time, Lua calling them (the
calls times the calibrated cost), starting the two scripts, and the rest: the scripts' own
Lua (arithmetic, numbers turned into text, string work, the helper functions defined anew on
each run). Last, what some of the scripts' own Lua costs, each measured the same way (a
script doing it 20 times, less an empty one and less its commands' own time, per time).
Medians over repetitions; compare them with each other, not across machines.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from benchmarks.cycle_split import RunScript, wrapped_driver_run
from benchmarks.server import CommandStats, start_server
from django_redis_locks.core import Backend, Lock, Semaphore
from django_redis_locks.core.primitive import Primitive
from django_redis_locks.core.protocol.scripting import Call

#: ``redis.call``s per calibration script.
_CALLS = 20
_EMPTY = "return 0"
_EXISTS = f"for _ = 1, {_CALLS} do redis.call('EXISTS', KEYS[1]) end return 0"
#: Steps of the scripts' own Lua, each timed as ``_CALLS`` runs of its body.
_STEPS = {
    "a number made into text (string.format)": "local x = string.format('%.0f', 1764167000000 + i)",
    "a text made into a number (tonumber)": "local x = tonumber('1764167000000')",
    "the server clock read (TIME) and made into ms and us": (
        "local t = redis.call('TIME') "
        "local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
        "local us = tonumber(t[1]) * 1000000 + tonumber(t[2])"
    ),
    "8 fields of a hash read into Lua (HMGET), beyond the command": (
        "local h = redis.call('HMGET', KEYS[1], 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h')"
    ),
    "a holder id from a token (sha1hex)": (
        "local h = string.sub(redis.sha1hex('nzfbC0Vsg2uo36us4-MGRstuM30'), 1, 16)"
    ),
}


@dataclass(frozen=True)
class Split:
    """Redis's time for one cycle, in microseconds, and what it is made of."""

    scripts_us: float  # EVALSHA: everything Redis did for the cycle's two scripts
    commands: float  # redis.calls per cycle
    commands_us: float  # their own time
    calling_us: float  # Lua calling them (calls x calibrated cost per call)
    starting_us: float  # the empty script with the same keys and arguments, for each call
    per_call_us: float  # the calibrated cost of one call from Lua

    @property
    def rest_us(self) -> float:
        return self.scripts_us - self.commands_us - self.calling_us - self.starting_us


def _stats(client: redis.Redis, loop: Callable[[], None], runs: int) -> tuple[float, float, float]:
    """(EVALSHA us, commands run from scripts, their us) per run of ``loop``."""
    stats = CommandStats(client)
    stats.start()
    loop()
    calls = stats.delta()
    inner = [name for name in calls if name != "evalsha"]
    return (
        stats.usec["evalsha"] / runs,
        sum(calls[name] for name in inner) / runs,
        sum(stats.usec[name] for name in inner) / runs,
    )


def _recorded_calls(primitive: Primitive[Any]) -> list[Call]:
    """The script calls of one acquire + release of ``primitive``."""
    calls: list[Call] = []

    def recording(run: RunScript) -> RunScript:
        def recording_run(client: Any, call: Call) -> Any:
            calls.append(call)
            return run(client, call)

        return recording_run

    with wrapped_driver_run(recording):
        primitive.acquire(blocking=False)
        primitive.release()
    return calls


def _script_cost(
    client: redis.Redis, source: str, keys: Sequence[Any], args: Sequence[Any], runs: int
) -> tuple[float, float]:
    """(EVALSHA us, its commands' us) per run of ``source`` with ``keys`` and ``args``."""
    script = client.register_script(source)

    def loop() -> None:
        for _ in range(runs):
            script(keys=keys, args=args)

    loop()  # loaded, warm
    evalsha_us, _, inner_us = _stats(client, loop, runs)
    return evalsha_us, inner_us


def measure(client: redis.Redis, primitive: Primitive[Any], cycles: int) -> Split:
    """One repetition: the cycle's split for ``primitive`` (warmed up first)."""

    def cycle() -> None:
        for _ in range(cycles):
            primitive.acquire(blocking=False)
            primitive.release()

    calls = _recorded_calls(primitive)
    cycle()
    scripts_us, commands, commands_us = _stats(client, cycle, cycles)
    empty_us = [_script_cost(client, _EMPTY, call.keys, call.args, cycles)[0] for call in calls]
    exists_us, exists_inner_us = _script_cost(client, _EXISTS, calls[0].keys, calls[0].args, cycles)
    per_call_us = (exists_us - empty_us[0] - exists_inner_us) / _CALLS
    return Split(
        scripts_us=scripts_us,
        commands=commands,
        commands_us=commands_us,
        calling_us=commands * per_call_us,
        starting_us=sum(empty_us),
        per_call_us=per_call_us,
    )


def steps(client: redis.Redis, runs: int) -> dict[str, float]:
    """Microseconds per run of each of :data:`_STEPS`, beyond its commands' own time."""
    keys = ["drl-split:steps"]
    client.hset(keys[0], mapping=dict.fromkeys("abcdefgh", "x" * 20))
    empty_us = _script_cost(client, _EMPTY, keys, (), runs)[0]
    costs = {}
    for what, body in _STEPS.items():
        source = f"for i = 1, {_CALLS} do {body} end return 0"
        evalsha_us, inner_us = _script_cost(client, source, keys, (), runs)
        costs[what] = (evalsha_us - empty_us - inner_us) / _CALLS
    client.delete(keys[0])
    return costs


def _median_split(splits: list[Split]) -> Split:
    fields = Split.__dataclass_fields__
    return Split(**{name: statistics.median(getattr(s, name) for s in splits) for name in fields})


def report(title: str, split: Split) -> list[str]:
    rows = [
        (f"{title}: Redis running the two scripts", split.scripts_us),
        (f"  the {split.commands:.1f} commands they ran, their own time", split.commands_us),
        (f"  Lua calling them ({split.per_call_us:.2f} us a call)", split.calling_us),
        (
            "  starting the two scripts (empty ones with the same keys and arguments)",
            split.starting_us,
        ),
        ("  the rest: the scripts' own Lua", split.rest_us),
    ]
    return [f"{label:<76} {value:7.1f} us" for label, value in rows]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.script_split", description=__doc__)
    parser.add_argument("--cycles", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    bench = start_server()
    try:
        client = bench.client()
        backend = Backend(client, namespace="drl-split")
        primitives: list[tuple[str, Primitive[Any]]] = [
            ("lock", Lock("split", client=backend, timeout=10)),
            ("semaphore (3 slots)", Semaphore("split", 3, client=backend, timeout=10)),
        ]
        print(f"{bench.flavour} {bench.version}, {args.reps} x {args.cycles} cycles, medians:")
        for title, primitive in primitives:
            splits = [measure(client, primitive, args.cycles) for _ in range(args.reps)]
            print("\n".join(report(title, _median_split(splits))))
        measured = [steps(client, args.cycles) for _ in range(args.reps)]
        print("some of the scripts' own Lua, each:")
        for what in _STEPS:
            print(f"  {what:<74} {statistics.median(m[what] for m in measured):7.2f} us")
        backend.close()
        client.close()
    finally:
        bench.stop()


if __name__ == "__main__":
    main()

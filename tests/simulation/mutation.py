"""Mutation run over the Lua scripts: how many protocol mutants the simulation and the suite kill.

Run:  .venv/bin/python -m tests.simulation.mutation [--limit N] [--seeds S] [--seed G]
      [--jobs J] [--out test-artifacts/mutation.json]

``--limit`` valid mutants (default 64) are drawn deterministically (generator seed ``--seed``)
from every comparison, whole-statement ``redis.call``, numeric constant, reply code and
``and``/``or`` in the code (never in comments) of the lock/semaphore scripts and lib helpers,
spread over the files and kinds. A mutant that does not compile (SCRIPT LOAD) is 'invalid', one
of a lib definition no script pastes in is 'unused'; both are replaced by the next candidate.
Each mutant runs in subprocesses that read the scripts from a temporary copy (this module,
imported with DRL_MUTANT_SCRIPTS=<dir>, replaces ``scripting._read``; the package's files are
never written): first ``--seeds`` simulation histories (default 300, stopping at the first
violation), then, if none, a fast set of core scenario tests. A violation, a failing test, a
crash or a timeout kills the mutant. The JSON summary lists each survivor's diff, and those
that no test can kill (UNKILLABLE, each with its reason) apart.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from django_redis_locks.core.protocol import scripting

ENV = "DRL_MUTANT_SCRIPTS"
_LIVE: set[int] = set()  # process groups of the running subprocesses
SCRIPTS = Path(scripting.__file__).parent / "scripts"
TARGETS = ["lock_acquire", "lock_release", "lock_extend", "sem_acquire", "sem_release"]
TARGETS += ["sem_refresh", "lib/estimate", "lib/gone", "lib/lock", "lib/registry"]
TARGETS += ["lib/semaphore", "lib/hot", "lock_take_over"]
SUITE = [f"tests/core/test_{n}.py" for n in ("lock", "semaphore", "lock_queue", "resends")]
SUITE += ["tests/core/test_fencing.py", "tests/core/test_handover_turns.py"]
SUITE += ["tests/core/test_boundaries.py"]  # what scripts do in the millisecond a time ends
SUITE += ["tests/core/test_late_copies.py"]  # late copies and evicted holders
SUITE += ["tests/core/test_lean_cycle.py"]  # what a cycle costs, the lazy registry's bounds
SUITE += ["tests/core/test_metadata_checks.py"]  # the metadata stored in pieces, read whole
SUITE += ["tests/core/test_hot.py"]  # the contention figures
SUITE += ["tests/core/test_inspect_waiters.py"]  # the listings of waiters (lib steps)
SUITE += ["tests/core/test_handoff.py"]  # hand_off / take_over (lock_take_over)
#: Mutants that no test can kill, each with the reason: (file, line before, line after), both
#: stripped -> why. "equivalent": no run can tell them apart; "outside the promises": they
#: change what Redis keeps, but by less than any promise bounds. A survivor listed here is
#: reported apart, and the score over the others is given beside the raw one.
UNKILLABLE = {
    (
        "sem_acquire.lua",
        "if mine and tonumber(mine) > now_ms then",
        "if mine and tonumber(mine) >= now_ms then",
    ): "equivalent: the prune just before drops every holder whose slot ended by now (with its "
    "record), up to 32 a script in expiry order, so a slot ending in this millisecond is gone "
    "unless 32 older dead slots came first (test_boundaries.py shows the ask admitted anew)",
    (
        "sem_acquire.lua",
        "if info[1] and (holding > 0 or waiting) then",
        "if info[1] or (holding > 0 or waiting) then",
    ): "equivalent: the info hash (which holds the limit) outlives every holder and waiter "
    "(keys_outlive_contents), so with someone holding or waiting info[1] is always set",
    (
        "lib/semaphore.lua",
        "local queue = redis.call('ZRANGE', queue_key, 0, most * 2 + 16, 'WITHSCORES')",
        "local queue = redis.call('ZRANGE', queue_key, 0, most * 2 + 17, 'WITHSCORES')",
    ): "outside the promises: how many places of the queue a listing looks at for its first "
    "waiters (one more; a listing, not the protocol)",
    (
        "lib/hot.lua",
        "if w == #HOT_WINDOWS and at < index - 1 then",
        "if w == #HOT_WINDOWS and at < index - 2 then",
    ): "outside the promises: how long a name keeps the score it inherited for the ranking of "
    "a full bucket (an hour more; the figures shown are unchanged)",
    (
        "lib/semaphore.lua",
        "if wait_ms < 0 then",
        "if wait_ms <= 0 then",
    ): "equivalent: wait_ms is -1 (nobody holds) or a holder's expiry after now (>= 1 ms)",
    (
        "lib/semaphore.lua",
        "if wait_ms < 0 then",
        "if wait_ms < 1 then",
    ): "equivalent: wait_ms is -1 (nobody holds) or a holder's expiry after now (>= 1 ms)",
    (
        "sem_acquire.lua",
        "if #fields > 0 then",
        "if #fields > 1 then",
    ): "equivalent: fields holds field-value pairs, so its length is never 1",
    (
        "lib/lock.lua",
        "if fence < now_us then",
        "if fence <= now_us then",
    ): "equivalent: when equal, both give the fence now_us",
    (
        "lock_acquire.lua",
        "if held[9] and string.find(held[9], 'X', 1, true) and not (held[1] == token and "
        "holder_ttl > 0)",
        "if held[9] and string.find(held[9], 'X', 1, true) and not (held[1] == token and "
        "holder_ttl >= 0)",
    ): "equivalent: a token listed as force-released never holds the name (a forced release "
    "removes the hold, and such a token is refused), so the clause never sees it holding",
    (
        "lib/semaphore.lua",
        "if holder[2] and tonumber(holder[2]) > last then",
        "if holder[2] and tonumber(holder[2]) >= last then",
    ): "equivalent: when equal, last is given the value it has",
    (
        "lib/semaphore.lua",
        "if left < best then",
        "if left <= best then",
    ): "equivalent: when equal, best is given the value it has",
    (
        "lib/registry.lua",
        "redis.call('ZADD', names_key, 0, member)",
        "redis.call('ZADD', names_key, 1, member)",
    ): "equivalent: every name gets the same score either way, so the lexicographic order "
    "that registry_page reads (ZRANGEBYLEX) is the same",
    (
        "lib/semaphore.lua",
        "local first = redis.call('ZRANGEBYSCORE', holders_key, '(' .. now_ms, '+inf', 'LIMIT', "
        "0, 8)",
        "local first = redis.call('ZRANGEBYSCORE', holders_key, '(' .. now_ms, '+inf', 'LIMIT', "
        "0, 9)",
    ): "outside the promises: how many of the first holders to expire the wait estimate looks "
    "at (a hint; the reference promises none)",
    (
        "lib/registry.lua",
        "if redis.call('PTTL', expiry_key) < keep then",
        "if redis.call('PTTL', expiry_key) <= keep then",
    ): "outside the promises: at the exact millisecond the keys get REGISTRY_SLACK_MS more",
    (
        "lib/registry.lua",
        "local REGISTRY_SLACK_MS = 2000  -- extend by this much more, so that few writes need to",
        "local REGISTRY_SLACK_MS = 2001  -- extend by this much more, so that few writes need to",
    ): "outside the promises: a margin on the registry keys' expiry, which only has to "
    "outlive their entries",
    (
        "lib/semaphore.lua",
        "if lease[2] and tonumber(lease[2]) > last then",
        "if lease[2] and tonumber(lease[2]) >= last then",
    ): "equivalent: when equal, last is given the value it has",
    (
        "lib/registry.lua",
        "if listed and tonumber(listed) >= need_ms then",
        "if listed and tonumber(listed) > need_ms then",
    ): "outside the promises: at the exact millisecond the entry already lasts, it is listed "
    "anew (a write more, the same entry)",
    (
        "lib/gone.lua",
        "if string.find(list, hid, 1, true) then  -- (rare: the hold ended twice) rebuild the list",
        "if string.find(list, hid, 2, true) then  -- (rare: the hold ended twice) rebuild the list",
    ): "equivalent: every entry starts with its kind letter, so a holder id is never found at "
    "the list's first character",
    (
        "lib/registry.lua",
        "if not kept or kept < need_ms then",
        "if not kept or kept <= need_ms then",
    ): "equivalent: an entry kept exactly until need_ms fits, and the function returned above",
    (
        "lib/registry.lua",
        "if kept and kept >= need_ms and kept <= need_ms + REGISTRY_AHEAD_MS then",
        "if kept and kept >= need_ms and kept < need_ms + REGISTRY_AHEAD_MS then",
    ): "outside the promises: at the exact millisecond an entry lasts REGISTRY_AHEAD_MS past "
    "need_ms it is written again, with the same value",
    (
        "lib/gone.lua",
        "if #entries >= GONE_KEEP then",
        "if #entries > GONE_KEEP then",
    ): "equivalent: the rebuild (a hold that ended twice) drops that hold's old entry, so the "
    "list it rebuilds never has more than GONE_KEEP entries to keep",
    (
        "lib/semaphore.lua",
        "last = holder[2] and tonumber(holder[2]) or 0",
        "last = holder[2] and tonumber(holder[2]) or 1",
    ): "equivalent: last is only compared with now_ms and with 0 when the holders' key is "
    "empty: 0 and 1 are both past, and the PEXPIRE of a key that does not exist does nothing",
    (
        "lib/lock.lua",
        "if own > now_ms then  -- handed the lock, not yet confirmed: it holds",
        "if own >= now_ms then  -- handed the lock, not yet confirmed: it holds",
    ): "outside the promises: a listing's count of waiters, off by one only in the very "
    "millisecond the lease of a waiter handed the lock ends",
    (
        "lib/registry.lua",
        "local REGISTRY_PRUNE = 16",
        "local REGISTRY_PRUNE = 17",
    ): "outside the promises: how many expired registry entries a new entry drops now and then "
    "(one more; bounded work either way, and listings drop them all before they read)",
    (
        "lib/gone.lua",
        "cut = string.find(list, ' ', cut + 1, true)",
        "cut = string.find(list, ' ', cut + 2, true)",
    ): "equivalent: the character after a separating space starts an entry, never a space "
    "(entries are 17 characters or more)",
}
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_FLIP = {">": ">=", ">=": ">", "<": "<=", "<=": "<", "==": "~=", "~=": "=="}
_PATTERNS = {  # kind -> (regex on the code with strings masked, replacement of the match)
    "compare": (re.compile(r">=|<=|~=|==|(?<![<>=~])[<>](?!=)"), lambda m: _FLIP[m[0]]),
    "logic": (re.compile(r"\b(?:and|or)\b"), lambda m: "or" if m[0] == "and" else "and"),
    "reply": (re.compile(r"(?<=return )[01]\b|(?<=\{)[01](?=,)"), lambda m: str(1 - int(m[0]))),
    "constant": (
        re.compile(r"(?<![\w.\[{])(?<!return )(?<!\{-)\d+(?![\w.\]])"),
        lambda m: str(int(m[0]) + 1),
    ),
}


def _install(directory: str) -> None:
    """Make this process read the scripts from ``directory`` (a mutant's copy)."""

    def read(*parts: str) -> str:
        return Path(directory, *parts).read_text("utf-8")

    scripting._read = read
    scripting._CACHE.clear()


if os.environ.get(ENV):  # a run's subprocess: imported by ``-p`` or ``-m``, before any load
    _install(os.environ[ENV])


@dataclass
class Mutant:
    file: str  # e.g. "lib/lock.lua"
    line: int  # 1-based
    kind: str
    before: str
    after: str
    outcome: str = ""  # killed_simulation, killed_suite, survived
    reason: str = ""
    seconds: float = 0.0


def _code(line: str) -> str:
    """``line`` with string contents masked and any comment blanked (same length)."""
    masked = _STRING.sub(lambda m: m[0][0] + "x" * (len(m[0]) - 2) + m[0][-1], line)
    cut = masked.find("--")
    return masked if cut < 0 else masked[:cut] + " " * (len(masked) - cut)


def candidates(seed: int) -> list[Mutant]:
    """Every mutation site, ordered round-robin over files and kinds after a seeded shuffle."""
    rng = random.Random(seed)
    per_file: list[list[list[Mutant]]] = []
    for target in TARGETS:
        lines = (SCRIPTS / f"{target}.lua").read_text("utf-8").splitlines()
        kinds: dict[str, list[Mutant]] = {}
        for number, line in enumerate(lines, 1):
            code = _code(line)
            found = kinds.setdefault("drop", [])
            statement = code.strip()
            if statement.startswith("redis.call(") and statement.endswith(")"):
                indent = line[: len(line) - len(line.lstrip())]
                found.append(
                    Mutant(f"{target}.lua", number, "drop", line, indent + "local _ = nil")
                )
            for kind, (pattern, replace) in _PATTERNS.items():
                for match in pattern.finditer(code):
                    after = line[: match.start()] + replace(match) + line[match.end() :]
                    kinds.setdefault(kind, []).append(
                        Mutant(f"{target}.lua", number, kind, line, after)
                    )
        groups = [sorted(group, key=lambda _: rng.random()) for group in kinds.values() if group]
        per_file.append(sorted(groups, key=lambda _: rng.random()))
    return _round_robin([_round_robin(groups) for groups in per_file])


def _why_unkillable(mutant: Mutant) -> str:
    """Why ``mutant`` cannot be killed ("" when it can), from UNKILLABLE."""
    return UNKILLABLE.get((mutant.file, mutant.before.strip(), mutant.after.strip()), "")


def _round_robin(groups: list[list[Mutant]]) -> list[Mutant]:
    longest = max((len(group) for group in groups), default=0)
    return [group[i] for i in range(longest) for group in groups if i < len(group)]


def _files() -> dict[str, str]:
    return {str(p.relative_to(SCRIPTS)): p.read_text("utf-8") for p in SCRIPTS.rglob("*.lua")}


def _mutated(files: dict[str, str], mutant: Mutant) -> dict[str, str]:
    lines = files[mutant.file].split("\n")
    assert lines[mutant.line - 1] == mutant.before
    lines[mutant.line - 1] = mutant.after
    return {**files, mutant.file: "\n".join(lines)}


def _expanded(files: dict[str, str]) -> dict[str, str]:
    """Every top-level script as ``load`` would build it from ``files`` (in this process)."""
    original = scripting._read
    scripting._read = lambda *parts: files["/".join(parts)]
    try:
        names = [name[:-4] for name in files if "/" not in name]
        return {name: scripting._expand(files[f"{name}.lua"]) for name in names}
    finally:
        scripting._read = original


def _run(command: list[str], env: dict[str, str], timeout: float, root: str) -> tuple[int, str]:
    """Run ``command`` in its own process group; on timeout end that group. Returns rc, tail."""
    proc = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=root,
    )
    _LIVE.add(proc.pid)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # end the subprocess (its servers die with it)
        _end(proc.pid)
        proc.communicate()
        return -1, "timeout"
    finally:
        _LIVE.discard(proc.pid)
    lines = [line for line in out.splitlines() if line.strip()]
    return proc.returncode, " | ".join(lines[-3:])[-400:]


def _end(group: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def snapshot(rev: str) -> tuple[str, str]:
    """The tests (and pytest's config) as committed at ``rev``, in a temporary directory: what
    the subprocesses run, so that edits made meanwhile in the work tree do not change a run."""
    root, commit = tempfile.mkdtemp(prefix="drl-mutation-"), _git("rev-parse", rev).decode().strip()
    with tarfile.open(fileobj=io.BytesIO(_git("archive", commit, "tests", "pyproject.toml"))) as t:
        t.extractall(root, filter="data")
    shutil.copy(__file__, Path(root, "tests", "simulation", "mutation.py"))  # this version
    return root, commit


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], check=True, capture_output=True).stdout


def evaluate(mutant: Mutant, files: dict[str, str], seeds: int, root: str) -> Mutant:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="drl-mutant-") as directory:
        for name, text in _mutated(files, mutant).items():
            (Path(directory) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(directory) / name).write_text(text, "utf-8")
        env = {**os.environ, ENV: directory, "PYTHONDONTWRITEBYTECODE": "1"}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        command = [sys.executable, "-m", "tests.simulation.mutation", "--simulate", str(seeds)]
        rc, tail = _run(command, env, 180, root)
        if rc != 0:
            mutant.outcome, mutant.reason = "killed_simulation", tail
        else:
            pytest = [sys.executable, "-m", "pytest", *SUITE, "-x", "-q", "-p", "no:randomly"]
            rc, tail = _run([*pytest, "-p", "tests.simulation.mutation"], env, 240, root)
            mutant.outcome = "survived" if rc == 0 else "killed_suite"
            mutant.reason = "" if rc == 0 else tail
    mutant.seconds = round(time.monotonic() - started, 1)
    return mutant


def simulate(count: int) -> int:
    """The subprocess side: ``count`` histories on the scripts of $DRL_MUTANT_SCRIPTS."""
    from tests.harness.servers import RedisServer
    from tests.simulation.config import DEFAULT_STEPS, SimConfig
    from tests.simulation.shrink import run_history

    server = RedisServer()
    server.start()
    try:
        with server.client(socket_timeout=10) as client:
            for seed in range(count):
                history = run_history(client, SimConfig.draw(seed, DEFAULT_STEPS))
                if history.failed:
                    print(f"seed {seed}: {history.violations[0]}"[:300])
                    return 1
    finally:
        server.stop()
    print(f"{count} histories: no violation")
    return 0


def select(files: dict[str, str], seed: int, limit: int) -> tuple[list[Mutant], dict[str, int]]:
    """The first ``limit`` candidates that compile and change some script."""
    import redis

    from tests.harness.servers import RedisServer

    original, chosen = _expanded(files), list[Mutant]()
    skipped = {"invalid": 0, "unused": 0}
    server = RedisServer()
    server.start()
    try:
        with server.client() as client:
            for mutant in candidates(seed):
                if len(chosen) >= limit:
                    break
                built = _expanded(_mutated(files, mutant)).items()
                changed = {name: s for name, s in built if s != original[name]}
                try:
                    for source in changed.values():
                        client.script_load(source)
                except redis.ResponseError:
                    skipped["invalid"] += 1
                    continue
                if not changed:
                    skipped["unused"] += 1
                    continue
                chosen.append(mutant)
    finally:
        server.stop()
    return chosen, skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=64, help="valid mutants to run")
    parser.add_argument("--seeds", type=int, default=300, help="simulation histories per mutant")
    parser.add_argument("--seed", type=int, default=1, help="seed of the mutant draw")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once")
    parser.add_argument("--out", default="test-artifacts/mutation.json")
    parser.add_argument("--rev", default="HEAD", help="commit whose tests judge the mutants")
    parser.add_argument("--simulate", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.simulate is not None:
        return simulate(args.simulate)
    files, (root, commit) = _files(), snapshot(args.rev)
    line = files["lock_acquire.lua"].split("\n")[0]
    baseline = evaluate(Mutant("lock_acquire.lua", 1, "none", line, line), files, args.seeds, root)
    if baseline.outcome != "survived":  # the unmutated scripts must pass, or nothing counts
        print(f"the unmutated scripts fail: {baseline.reason}", file=sys.stderr)
        return 2
    mutants, skipped = select(files, args.seed, args.limit)
    started, done = time.monotonic(), 0
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(evaluate, m, files, args.seeds, root) for m in mutants]
        try:
            for future in concurrent.futures.as_completed(futures):
                m, done = future.result(), done + 1
                print(
                    f"[{done}/{len(mutants)}] {m.outcome:17} {m.file}:{m.line} {m.kind}: "
                    f"{m.before.strip()} -> {m.after.strip()} ({m.seconds} s)",
                    flush=True,
                )
        except KeyboardInterrupt:
            for future in futures:
                future.cancel()
            for group in list(_LIVE):
                _end(group)
            raise
    count = {o: sum(m.outcome == o for m in mutants) for o in ("killed_simulation", "killed_suite")}
    survivors = [m for m in mutants if m.outcome == "survived"]
    unkillable = [m for m in survivors if _why_unkillable(m)]
    killable = len(mutants) - len(unkillable)
    summary = {
        "generated": len(mutants) + sum(skipped.values()),
        **skipped,
        "valid": len(mutants),
        **count,
        "survived": len(survivors),
        "kill_rate": round(1 - len(survivors) / max(len(mutants), 1), 3),
        "unkillable": len(unkillable),
        "kill_rate_of_killable": round(sum(count.values()) / max(killable, 1), 3),
        "histories_per_mutant": args.seeds,
        "tests_at": commit,
        "seconds": round(time.monotonic() - started),
        "survivors": [
            {
                **{k: asdict(m)[k] for k in ("file", "line", "kind", "before", "after")},
                "unkillable": _why_unkillable(m),
            }
            for m in survivors
        ],
        "mutants": [asdict(m) for m in mutants],
    }
    shutil.rmtree(root)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n", "utf-8")
    print(json.dumps({k: v for k, v in summary.items() if k != "mutants"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The test build of the scripts: a Lua prelude that puts TIME, expiry and PUBLISH in virtual
time, installed in place of the real script loader for the length of a simulation."""

from __future__ import annotations

import contextlib
import hashlib
import sys
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any

from django_redis_locks.core.protocol import scripting

#: Pasted before each script. A local ``redis`` shadows the global one for the rest of the
#: chunk (the helpers pasted by ``-- @include`` come after it, so they see it too).
PRELUDE = r"""
local sim_real = redis
local redis = setmetatable({}, {__index = sim_real})
local sim_now = tonumber(sim_real.call('GET', 'sim:clock'))
local SIM_WRITES = {HSET = true, HDEL = true, ZADD = true, ZREM = true, DEL = true,
    UNLINK = true, HSETNX = true, HINCRBY = true, ZINCRBY = true, SET = true,
    ZREMRANGEBYSCORE = true, ZREMRANGEBYRANK = true, ZPOPMIN = true, RPUSH = true,
    LPUSH = true, INCR = true}
local function sim_do(raw, cmd, ...)
    local name = string.upper(cmd)
    local args = {...}
    if name == 'TIME' then
        return {string.format('%.0f', math.floor(sim_now / 1000)),
            string.format('%.0f', (sim_now % 1000) * 1000)}
    elseif name == 'PEXPIRE' or name == 'EXPIRE' then
        local ms = tonumber(args[2])
        if name == 'EXPIRE' then ms = ms * 1000 end
        if sim_real.call('EXISTS', args[1]) == 0 then return 0 end
        if ms <= 0 then
            sim_real.call('DEL', args[1])
            sim_real.call('ZREM', 'sim:exp', args[1])
            return 1
        end
        sim_real.call('PERSIST', args[1])
        sim_real.call('ZADD', 'sim:exp', sim_now + ms, args[1])
        return 1
    elseif name == 'PTTL' or name == 'TTL' then
        if sim_real.call('EXISTS', args[1]) == 0 then return -2 end
        local at = sim_real.call('ZSCORE', 'sim:exp', args[1])
        if not at then return -1 end
        local left = tonumber(at) - sim_now
        if name == 'TTL' then return math.floor((left + 500) / 1000) end
        return left
    elseif name == 'PERSIST' then
        if sim_real.call('EXISTS', args[1]) == 0 then return 0 end
        return sim_real.call('ZREM', 'sim:exp', args[1])
    elseif name == 'PUBLISH' then
        sim_real.call('RPUSH', 'sim:pub', args[1] .. ' ' .. args[2])
        return tonumber(sim_real.call('HGET', 'sim:subs', args[1]) or '0')
    elseif SIM_WRITES[name] then
        local touched = {args[1]}
        if name == 'DEL' or name == 'UNLINK' then touched = args end
        local existed = {}
        for i, key in ipairs(touched) do existed[i] = sim_real.call('EXISTS', key) == 1 end
        local reply = raw(cmd, ...)
        for i, key in ipairs(touched) do
            -- a deleted or emptied key has no TTL; a key made anew has none until PEXPIRE
            if not existed[i] or sim_real.call('EXISTS', key) == 0 then
                sim_real.call('ZREM', 'sim:exp', key)
            end
        end
        return reply
    end
    return raw(cmd, ...)
end
redis.call = function(cmd, ...) return sim_do(sim_real.call, cmd, ...) end
redis.pcall = function(cmd, ...) return sim_do(sim_real.pcall, cmd, ...) end
"""

#: Run by the simulator before each step (not through the prelude): set the clock, delete the
#: keys whose virtual expiry passed, and return every key of the namespace with its expiry and
#: what the invariants read of it (for the lock waiters' and semaphore info hashes, their
#: field names too; for the contention figures, every member and its figures).
TICK = r"""
redis.call('SET', 'sim:clock', ARGV[1])
local due = redis.call('ZRANGEBYSCORE', 'sim:exp', '-inf', ARGV[1])
for _, key in ipairs(due) do redis.call('DEL', key) end
if #due > 0 then redis.call('ZREMRANGEBYSCORE', 'sim:exp', '-inf', ARGV[1]) end
local out = {}
for _, key in ipairs(redis.call('KEYS', ARGV[2])) do
    local kind = redis.call('TYPE', key)['ok']
    local exp = redis.call('ZSCORE', 'sim:exp', key) or ''
    local pttl = redis.call('PTTL', key)
    local data, names = {}, {}
    if kind == 'hash' and string.sub(key, -4) == ':hot' then
        data = redis.call('HGETALL', key)  -- contention figures: member, figures, ...
    elseif kind == 'hash' then
        data = redis.call('HMGET', key, 'token', 'expires', 'fence', 'limit', 'reserved', 'q',
            'l')
        for i = 1, 7 do data[i] = data[i] or '' end
        if string.find(key, ':lockw:', 1, true) or string.find(key, ':semi:', 1, true) then
            names = redis.call('HKEYS', key)  -- waiter tokens; semaphore h:/w: records
        end
    elseif kind == 'zset' then
        data = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    end
    out[#out + 1] = {key, kind, exp, pttl, data, names}
end
return out
"""

_SCRIPT_DIR = resources.files("django_redis_locks.core.protocol").joinpath("scripts")


def script_names() -> list[str]:
    """The names of the top-level scripts (``scripts/<name>.lua``)."""
    return sorted(p.name[:-4] for p in _SCRIPT_DIR.iterdir() if p.name.endswith(".lua"))


def simulated(script: scripting.Script) -> scripting.Script:
    """The test build of ``script``: the prelude before its source, and its own SHA."""
    source = PRELUDE + script.source
    sha = hashlib.sha1(source.encode("utf-8"), usedforsecurity=False).hexdigest()
    return scripting.Script(script.name, source, sha)


@contextlib.contextmanager
def simulated_scripts() -> Iterator[dict[str, scripting.Script]]:
    """Replace ``load`` wherever a core module bound it by one that gives the test build."""
    original: Callable[[str], scripting.Script] = scripting.load
    built = {name: simulated(original(name)) for name in script_names()}

    def load(name: str) -> scripting.Script:
        script = built.get(name)
        if script is None:
            script = built[name] = simulated(original(name))
        return script

    patched: list[tuple[Any, str]] = []
    try:
        for module_name, module in list(sys.modules.items()):
            if module_name.startswith("django_redis_locks") and (
                getattr(module, "load", None) is original
            ):
                setattr(module, "load", load)  # noqa: B010
                patched.append((module, "load"))
        yield built
    finally:
        for module, attribute in patched:
            setattr(module, attribute, original)

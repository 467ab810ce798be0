-- lib/registry: the per-bucket registry of live locks and semaphores, for the scripts that
-- include it (``-- @include registry``). Every function takes its keys as arguments, and the
-- including script passes KEYS entries.
--
-- names_key   ZSET  member -> 0, ordered by member: the listing, searchable by prefix
-- expiry_key  ZSET  member -> expiry (ms, server time): which entries to forget when
-- member      "lock:<name>" or "sem:<name>"
--
-- Both keys expire a little after the last entry they hold, and every write prunes a few
-- expired entries, so holders that crashed leave no trace.
local REGISTRY_GRACE_MS = 1000
local REGISTRY_PRUNE = 16

-- Forget up to ``limit`` entries whose expiry has passed.
local function registry_prune(names_key, expiry_key, now_ms, limit)
    local old = redis.call('ZRANGEBYSCORE', expiry_key, '-inf', now_ms, 'LIMIT', 0, limit)
    for _, member in ipairs(old) do
        redis.call('ZREM', names_key, member)
        redis.call('ZREM', expiry_key, member)
    end
end

-- List ``member`` until ``expires_ms``; with ``only_later`` an earlier expiry is ignored.
local function registry_set(names_key, expiry_key, member, expires_ms, now_ms, only_later)
    registry_prune(names_key, expiry_key, now_ms, REGISTRY_PRUNE)
    redis.call('ZADD', names_key, 0, member)
    if only_later then
        redis.call('ZADD', expiry_key, 'GT', expires_ms, member)  -- GT still adds new members
    else
        redis.call('ZADD', expiry_key, expires_ms, member)
    end
    -- Both keys always get the same expiry: one look at it does for the two.
    local keep = expires_ms - now_ms + REGISTRY_GRACE_MS
    if redis.call('PTTL', expiry_key) < keep then
        redis.call('PEXPIRE', names_key, keep)
        redis.call('PEXPIRE', expiry_key, keep)
    end
end

local function registry_remove(names_key, expiry_key, member)
    redis.call('ZREM', names_key, member)
    redis.call('ZREM', expiry_key, member)
end

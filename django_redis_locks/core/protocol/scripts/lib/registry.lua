-- lib/registry: the per-bucket registry of live locks and semaphores, for the scripts that
-- include it (``-- @include registry``). Every function takes its keys as arguments, and the
-- including script passes KEYS entries.
--
-- names_key   ZSET  member -> 0, ordered by member: the listing, searchable by prefix
-- expiry_key  ZSET  member -> expiry (ms, server time): which entries to forget when
-- member      "lock:<name>" or "sem:<name>"
--
-- Both keys expire a little after the last entry they hold, and about one new entry in four
-- prunes a few expired ones, so holders that crashed leave no trace. A release removes its entry at once
-- (an empty set is no key at all), so a released name leaves nothing here; listings prune
-- expired entries before they read.
local REGISTRY_GRACE_MS = 1000
local REGISTRY_SLACK_MS = 2000  -- extend by this much more, so that few writes need to
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
    local added
    if only_later then
        added = redis.call('ZADD', expiry_key, 'GT', expires_ms, member)  -- GT still adds
    else
        added = redis.call('ZADD', expiry_key, expires_ms, member)
    end
    if added == 1 then  -- a new entry (an update leaves the name list as it is)
        redis.call('ZADD', names_key, 0, member)
        if now_ms % 4 == 0 then  -- now and then, forget entries of holders that crashed
            registry_prune(names_key, expiry_key, now_ms, REGISTRY_PRUNE)
        end
    end
    -- Both keys always get the same expiry: one look at it does for the two.
    local keep = expires_ms - now_ms + REGISTRY_GRACE_MS
    if redis.call('PTTL', expiry_key) < keep then
        redis.call('PEXPIRE', names_key, keep + REGISTRY_SLACK_MS)
        redis.call('PEXPIRE', expiry_key, keep + REGISTRY_SLACK_MS)
    end
end

-- The entry of ``member`` is no longer live: forget it.
local function registry_remove(names_key, expiry_key, member)
    redis.call('ZREM', expiry_key, member)
    redis.call('ZREM', names_key, member)
end

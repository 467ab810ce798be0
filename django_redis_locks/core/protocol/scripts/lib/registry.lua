-- lib/registry: the per-bucket registry of locks and semaphores, for the scripts that
-- include it (``-- @include registry``). Every function takes its keys as arguments, and the
-- including script passes KEYS entries.
--
-- names_key   ZSET  member -> 0, ordered by member: the listing, searchable by prefix
-- expiry_key  ZSET  member -> until when (ms, server time) the entry is kept
-- member      "lock:<name>" or "sem:<name>"
--
-- Entries are kept lazily: a name is listed for a while past what its keys need
-- (REGISTRY_AHEAD_MS), and the primitive's hash records until when in its field 'l'
-- (registry_fit), so a name in steady use writes here once every few minutes, not on every
-- acquire and release. An entry may therefore name a lock or semaphore that is free now:
-- listings describe the names and skip the free ones. Invariant: while a primitive's hash
-- exists, its entry is kept at least until the hash's own expiry, and at least until the
-- 'l' the hash records. Both keys expire a little after the last entry they hold, and about
-- one new entry in four prunes a few expired ones, so names no longer used leave no trace;
-- listings prune expired entries before they read.
local REGISTRY_GRACE_MS = 1000
local REGISTRY_SLACK_MS = 2000  -- extend by this much more, so that few writes need to
local REGISTRY_PRUNE = 16
-- How much longer than its keys need a name is listed (ms): a name in use is listed anew at
-- most once in this time. Names no longer used leave the registry at most this long (plus the
-- grace) after their keys expire.
local REGISTRY_AHEAD_MS = @REGISTRY_AHEAD_MS@

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

-- Keep the entry of ``member`` between ``need_ms`` (when the primitive's keys now expire) and
-- REGISTRY_AHEAD_MS past it. ``listed`` is the primitive's 'l' as read (nil: none): until when
-- the entry is kept already. Falls short: the entry is made to last REGISTRY_AHEAD_MS past
-- ``need_ms``, so a name in steady use is listed anew once in that time. Lasts longer (a
-- long hold that was shortened, or released early): it is brought back to that, and both
-- keys to their last entry, so that what a name leaves goes soon after its keys. Returns the
-- new 'l' for the caller to write to the hash (as text), or nil when the entry fits already
-- (the usual case: no command). ``free``: what is left of a released name, which needs no
-- entry: one that falls short is left as it is.
local function registry_fit(names_key, expiry_key, member, listed, need_ms, now_ms, free)
    local kept = listed and tonumber(listed)
    if kept and kept >= need_ms and kept <= need_ms + REGISTRY_AHEAD_MS then
        return nil
    end
    local until_ms = need_ms + REGISTRY_AHEAD_MS
    if not kept or kept < need_ms then
        if free then
            return nil
        end
        registry_set(names_key, expiry_key, member, until_ms, now_ms, true)
        return string.format('%.0f', until_ms)
    end
    redis.call('ZADD', expiry_key, 'XX', until_ms, member)
    local last = redis.call('ZRANGE', expiry_key, -1, -1, 'WITHSCORES')
    if last[2] then
        local keep = tonumber(last[2]) - now_ms + REGISTRY_GRACE_MS + REGISTRY_SLACK_MS
        redis.call('PEXPIRE', names_key, keep)
        redis.call('PEXPIRE', expiry_key, keep)
    end
    return string.format('%.0f', until_ms)
end

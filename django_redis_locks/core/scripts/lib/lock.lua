-- lib/lock: shared steps of the lock scripts (``-- @include lock``). Every function takes its
-- keys as arguments, and the including script passes KEYS entries.
--
-- lock_key     HASH  token, fence, acquired, expires (ms, server time), meta, released;
--                    session, slice_end: whose slice is running and until when; reserved:
--                    until when a lock released during its holder's slice stays kept for that
--                    holder's session; told: the slice_end the first waiter was told about.
--                    The key expires a retention after the hold, so that the fence (and the
--                    last released token) outlive it.
-- queue_key    ZSET  token -> ticket of each blocked waiter: arrival order
-- waiters_key  HASH  token -> "<lease expiry ms> <ttl ms> <handoff 0|1> <session> <slice ms>
--                    <wake-up channel> <metadata JSON>"; the channel is the waiting
--                    process's own, so that a wake-up reaches that process only
--
-- A hold is live while its token is set and ``expires`` is in the future (server time).
--
-- Slices: the holder that got the lock may take it back, again and again, until its slice
-- (a few ms from that grant) ends, even while others wait; then its release hands the lock to
-- the first waiter. This keeps a lock busy under contention instead of paying a wake-up of
-- another process on every acquire, while no waiter waits more than a slice per holder ahead.

-- The first waiter whose lease is still running, with its record; drops dead ones on the way.
local function lock_queue_head(queue_key, waiters_key, now_ms)
    while true do
        local head = redis.call('ZRANGE', queue_key, 0, 0)[1]
        if not head then
            return nil, nil
        end
        local record = redis.call('HGET', waiters_key, head)
        if record and tonumber(string.match(record, '^(%d+)')) > now_ms then
            return head, record
        end
        redis.call('ZREM', queue_key, head)
        redis.call('HDEL', waiters_key, head)
    end
end

-- Take (or keep) a place in the queue, renew its lease; return the 1-based position.
local function lock_enqueue(queue_key, waiters_key, token, now_ms, now_us, lease_ms, record)
    if not redis.call('ZSCORE', queue_key, token) then
        redis.call('ZADD', queue_key, now_us, token)
    end
    redis.call('HSET', waiters_key, token, string.format('%.0f', now_ms + lease_ms) .. ' ' .. record)
    redis.call('PEXPIRE', queue_key, lease_ms * 2)
    redis.call('PEXPIRE', waiters_key, lease_ms * 2)
    return redis.call('ZRANK', queue_key, token) + 1
end

-- Leave the queue; return true if ``token`` was in it.
local function lock_dequeue(queue_key, waiters_key, token)
    if redis.call('ZREM', queue_key, token) == 1 then
        redis.call('HDEL', waiters_key, token)
        return true
    end
    return false
end

-- Make ``token`` the holder for ``ttl_ms``, in the slice of ``session`` that ends at
-- ``slice_end``; return its fence: max(last + 1, server time in microseconds), so fences keep
-- increasing even when the stored one was lost. ``last`` is the stored fence (or nil).
local function lock_grant(lock_key, token, ttl_ms, meta, now_ms, now_us, retention_ms, last,
                          session, slice_end)
    local fence = tonumber(last or '0') + 1
    if fence < now_us then
        fence = now_us
    end
    fence = string.format('%.0f', fence)
    redis.call('HSET', lock_key, 'token', token, 'fence', fence,
        'acquired', string.format('%.0f', now_ms), 'expires', string.format('%.0f', now_ms + ttl_ms),
        'meta', meta, 'session', session, 'slice_end', string.format('%.0f', slice_end),
        'reserved', '0')
    redis.call('PEXPIRE', lock_key, ttl_ms + retention_ms)
    return fence
end

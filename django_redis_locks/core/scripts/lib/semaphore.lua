-- lib/semaphore: shared steps of the semaphore scripts (``-- @include semaphore``). Every
-- function takes its keys as arguments, and the including script passes KEYS entries.
--
-- holders_key  ZSET  token -> expiry (ms, server time) of each holder
-- queue_key    ZSET  token -> ticket of each blocked waiter: arrival order
-- leases_key   ZSET  token -> expiry (ms) of each waiter's place in the queue
-- info_key     HASH  limit, ticket (last ticket handed out), h:<token> -> holder record
--                    "<acquired_ms> <ticket> <metadata JSON>", w:<token> -> waiter record
--                    "<ttl_ms> <wake-up channel> <metadata JSON>" (what its grant will be,
--                    and its process's own channel for the news)
local SEMAPHORE_GRACE_MS = 1000

-- Drop holders whose TTL ran out and waiters whose lease ran out; return how many went.
local function semaphore_prune(holders_key, queue_key, leases_key, info_key, now_ms)
    local gone = redis.call('ZRANGEBYSCORE', holders_key, '-inf', now_ms)
    for _, token in ipairs(gone) do
        redis.call('ZREM', holders_key, token)
        redis.call('HDEL', info_key, 'h:' .. token)
    end
    if redis.call('EXISTS', queue_key) == 0 then  -- nobody waits: no lease to look at
        return #gone
    end
    local left = redis.call('ZRANGEBYSCORE', leases_key, '-inf', now_ms)
    for _, token in ipairs(left) do
        redis.call('ZREM', leases_key, token)
        redis.call('ZREM', queue_key, token)
        redis.call('HDEL', info_key, 'w:' .. token)
    end
    return #gone + #left
end

-- A new ticket: larger than every earlier one, also after the counter was lost (server time
-- in microseconds), so tickets order arrivals and never repeat.
local function semaphore_ticket(info_key, now_us)
    local ticket = tonumber(redis.call('HGET', info_key, 'ticket') or '0') + 1
    if ticket < now_us then
        ticket = now_us
    end
    ticket = string.format('%.0f', ticket)
    redis.call('HSET', info_key, 'ticket', ticket)
    return ticket
end

-- Make all four keys live as long as the last holder or waiter, or delete them when nobody
-- holds or waits. Return the last expiry (ms), or nil when the semaphore is gone.
local function semaphore_keep(holders_key, queue_key, leases_key, info_key, now_ms)
    local waiting = redis.call('EXISTS', queue_key) == 1
    local holder = redis.call('ZRANGE', holders_key, -1, -1, 'WITHSCORES')
    if not holder[2] and not waiting then
        redis.call('DEL', holders_key, info_key)
        return nil
    end
    local last = now_ms
    if holder[2] and tonumber(holder[2]) > last then
        last = tonumber(holder[2])
    end
    if waiting then
        local lease = redis.call('ZRANGE', leases_key, -1, -1, 'WITHSCORES')
        if lease[2] and tonumber(lease[2]) > last then
            last = tonumber(lease[2])
        end
    end
    local keep = last - now_ms + SEMAPHORE_GRACE_MS
    redis.call('PEXPIRE', holders_key, keep)
    redis.call('PEXPIRE', info_key, keep)
    if waiting then
        redis.call('PEXPIRE', queue_key, keep)
        redis.call('PEXPIRE', leases_key, keep)
    end
    return last
end

-- Admit as many queued waiters, first come first served, as there are free slots: each is
-- made a holder here and told so in one message on its process's channel ("<member>#<holder
-- id>|<ticket>|<ttl ms>|<granted at, server ms>"), so that it needs no further round trip.
-- Returns how many.
local function semaphore_admit(holders_key, queue_key, leases_key, info_key, member, now_ms)
    if redis.call('EXISTS', queue_key) == 0 then
        return 0
    end
    local limit = tonumber(redis.call('HGET', info_key, 'limit') or '0')
    local free = limit - redis.call('ZCARD', holders_key)
    if free <= 0 then
        return 0
    end
    local first = redis.call('ZRANGE', queue_key, 0, free - 1, 'WITHSCORES')
    for i = 1, #first, 2 do
        local token = first[i]
        local ticket = string.format('%.0f', tonumber(first[i + 1]))
        local record = redis.call('HGET', info_key, 'w:' .. token) or '1 - {}'
        local ttl, channel, meta = string.match(record, '^(%d+) (%S+) (.*)$')
        redis.call('ZREM', queue_key, token)
        redis.call('ZREM', leases_key, token)
        redis.call('HDEL', info_key, 'w:' .. token)
        redis.call('ZADD', holders_key, now_ms + tonumber(ttl), token)
        redis.call('HSET', info_key, 'h:' .. token,
            string.format('%.0f', now_ms) .. ' ' .. ticket .. ' ' .. meta)
        if channel ~= '-' then
            redis.call('PUBLISH', channel, member .. '#' .. string.sub(redis.sha1hex(token), 1, 16)
                .. '|' .. ticket .. '|' .. ttl .. '|' .. now_ms)
        end
    end
    return #first / 2
end

-- lock_release: release the lock if, and only if, it is held with the given token (or, for a
-- forced release, by the holder with the given id), handing it to the first live waiter; or
-- take a waiter that gives up out of the queue.
--
-- KEYS[1]  <ns>:{b}:lock:<name>    lock hash (see lib/lock)
-- KEYS[2]  <ns>:{b}:lockq:<name>   queue: token -> ticket
-- KEYS[3]  <ns>:{b}:lockw:<name>   waiters: token -> lease, ttl, handoff flag, metadata
-- KEYS[4]  <ns>:{b}:reg:names      registry: members in name order
-- KEYS[5]  <ns>:{b}:reg:expiry     registry: member -> expiry (ms)
-- ARGV[1]  the holder's token, or with ARGV[4] = "holder" its holder id (the first 16 hex
--          digits of the token's SHA-1, as listings show it)
-- ARGV[2]  registry member ("lock:<name>"); wake-up messages, published on the waiter's own
--          channel, are "<member>#<holder id>", followed by "|<fence>|<ttl ms>|<granted at,
--          server ms>" when the lock was handed over, or by "|0|<ms>" when it stays kept for
--          the releasing session's slice that long
-- ARGV[3]  retention in milliseconds: how long the fence outlives the hold
-- ARGV[4]  "token" (the holder releases, or a waiter gives up) or "holder" (forced release)
--
-- Reply:
--    1  released, or this token's release had already happened (a retried release whose
--       first reply was lost)
--    2  the token was not holding but waiting: it left the queue
--    0  no live hold: it expired or was removed; nothing written
--   -1  held with another token (or another holder id); nothing written
-- @include registry
-- @include lock
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local forced = ARGV[4] == 'holder'

local held = redis.call('HMGET', KEYS[1], 'token', 'expires', 'released', 'fence',
    'slice_end', 'told')
local holder = held[1]
local live = holder and tonumber(held[2]) > now_ms
local match
if forced then
    match = live and string.sub(redis.sha1hex(holder), 1, 16) == ARGV[1]
else
    match = live and holder == ARGV[1]
end
if not match then
    if not forced then
        if lock_dequeue(KEYS[2], KEYS[3], ARGV[1]) then
            return 2
        end
        if held[3] == ARGV[1] then
            return 1
        end
    end
    if live then
        return -1
    end
    return 0
end

local head, record = lock_queue_head(KEYS[2], KEYS[3], now_ms)
local slice_left = tonumber(held[5] or '0') - now_ms
if head and slice_left > 0 and not forced then
    -- The releasing session's slice runs on: keep the lock for it until the slice ends, and
    -- tell the first waiter (once per slice) when to try.
    redis.call('HSET', KEYS[1], 'expires', '0', 'reserved', held[5])
    registry_remove(KEYS[4], KEYS[5], ARGV[2], now_ms)
    if held[6] ~= held[5] then
        redis.call('HSET', KEYS[1], 'told', held[5])
        redis.call('PUBLISH', string.match(record, '^%d+ %d+ %d %S+ %d+ (%S+) '),
            ARGV[2] .. '#' .. string.sub(redis.sha1hex(head), 1, 16) .. '|0|' .. slice_left)
    end
elseif head then
    lock_dequeue(KEYS[2], KEYS[3], head)
    local ttl, handoff, session, slice, channel, meta =
        string.match(record, '^%d+ (%d+) (%d) (%S+) (%d+) (%S+) (.*)$')
    local wake = ARGV[2] .. '#' .. string.sub(redis.sha1hex(head), 1, 16)
    if handoff == '1' then
        ttl = tonumber(ttl)
        local fence = lock_grant(KEYS[1], head, ttl, meta, now_ms, now_us, tonumber(ARGV[3]),
            held[4], session, now_ms + tonumber(slice))
        registry_set(KEYS[4], KEYS[5], ARGV[2], now_ms + ttl, now_ms, false)
        wake = wake .. '|' .. fence .. '|' .. ttl .. '|' .. now_ms
    else
        redis.call('HSET', KEYS[1], 'expires', '0')
        registry_remove(KEYS[4], KEYS[5], ARGV[2], now_ms)
    end
    redis.call('PUBLISH', channel, wake)
else
    -- Free: the hold ends now (its fields stay until the next grant overwrites them).
    if forced then
        redis.call('HSET', KEYS[1], 'expires', '0')
    else
        redis.call('HSET', KEYS[1], 'expires', '0', 'released', ARGV[1])
    end
    registry_remove(KEYS[4], KEYS[5], ARGV[2], now_ms)
    return 1
end
if not forced then
    -- A forced release is not recorded: the evicted holder must learn it lost the lock.
    redis.call('HSET', KEYS[1], 'released', ARGV[1])
end
return 1

-- lock_release: release the lock if, and only if, it is held with the given token (or, for a
-- forced release, by the holder with the given id), handing it to the first live waiter; or
-- take a waiter that gives up out of the queue. Sent twice, it takes effect once.
--
-- KEYS[1]  <ns>:{b}:lock:<name>    lock hash (see lib/lock)
-- KEYS[2]  <ns>:{b}:lockq:<name>   queue: token -> ticket
-- KEYS[3]  <ns>:{b}:lockw:<name>   waiters: token -> ttl, handoff, session, slice, channel, meta
-- KEYS[4]  <ns>:{b}:lockl:<name>   leases: token -> expiry (ms) of a waiter's place
-- KEYS[5]  <ns>:{b}:reg:names      registry: members in name order
-- KEYS[6]  <ns>:{b}:reg:expiry     registry: member -> expiry (ms)
-- ARGV[1]  the holder's token, or with ARGV[4] = "holder" its holder id (the first 16 hex
--          digits of the token's SHA-1, as listings show it)
-- ARGV[2]  registry member ("lock:<name>"); wake-up messages go to the waiter's own channel
--          (see the wake-up format in wakeup.py)
-- ARGV[3]  retention in milliseconds: how long the fence outlives the hold
-- ARGV[4]  "token" (the holder releases, or a waiter gives up) or "holder" (forced release)
-- ARGV[5]  hand-over window in milliseconds: how long a waiter handed the lock holds it
--          before it confirms, unless it is known alive (see lib/lock)
-- ARGV[6]  forced release: the request's id (random), so that it is recognised if resent
-- ARGV[7]  a waiter whose lease has more than this many ms left asked a moment ago
--
-- Reply:
--    1  released (evicted, for a forced release)
--    3  that very release (or forced release request) happened already: this is a resend
--    2  the token was not holding but waiting: it left the queue
--    0  no live hold: it expired or was removed; nothing written
--   -1  held with another token (or another holder id); nothing written
--   -2  the token's hold was force-released; nothing written
-- @include registry
-- @include lock
-- @include gone
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local forced = ARGV[4] == 'holder'

local held = redis.call('HMGET', KEYS[1], 'token', 'expires', 'fence', 'slice_end', 'told',
    'acquired', 'avg')
local holder = held[1]
local live = holder and tonumber(held[2]) > now_ms
local hid, match
if forced then
    hid = ARGV[1]
    match = live and string.sub(redis.sha1hex(holder), 1, 16) == hid
else
    hid = string.sub(redis.sha1hex(ARGV[1]), 1, 16)
    match = live and holder == ARGV[1]
end
if not match then
    if not forced and lock_dequeue(KEYS[2], KEYS[3], KEYS[4], ARGV[1]) then
        return 2
    end
    local kind, request = gone_kind(KEYS[1], hid)
    if kind == 'R' and not forced then
        return 3
    elseif kind == 'X' and not forced then
        return -2
    elseif kind == 'X' and request == ARGV[6] then
        return 3
    end
    if live then
        return -1
    end
    return 0
end

if not forced then  -- how long holds last, for waiters' estimates (a moving average)
    local lasted = now_ms - tonumber(held[6] or now_ms)
    if held[7] then
        lasted = math.floor((tonumber(held[7]) * 3 + lasted) / 4)
    end
    redis.call('HSET', KEYS[1], 'avg', string.format('%.0f', lasted))
end
local head, record = lock_queue_head(KEYS[2], KEYS[3], KEYS[4], now_ms)
local slice_left = tonumber(held[4] or '0') - now_ms
if head and slice_left > 0 and not forced then
    -- The releasing session's slice runs on: keep the lock for it until the slice ends, and
    -- tell the first waiter (once per slice) when to try.
    redis.call('HSET', KEYS[1], 'expires', '0', 'reserved', held[4])
    registry_remove(KEYS[5], KEYS[6], ARGV[2], now_ms)
    if held[5] ~= held[4] then
        redis.call('HSET', KEYS[1], 'told', held[4])
        redis.call('PUBLISH', string.match(record, '^%d+ %d %S+ %d+ (%S+) '),
            ARGV[2] .. '#' .. string.sub(redis.sha1hex(head), 1, 16) .. '|' .. slice_left)
    end
elseif head then
    if lock_hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[2], head,
            record, now_ms, now_us, tonumber(ARGV[3]), tonumber(ARGV[5]), tonumber(ARGV[7]),
            held[3]) == 0 then
        redis.call('HSET', KEYS[1], 'expires', '0')  -- woken to take it: free meanwhile
        registry_remove(KEYS[5], KEYS[6], ARGV[2], now_ms)
    end
else
    -- Free: the hold ends now (its fields stay until the next grant overwrites them).
    redis.call('HSET', KEYS[1], 'expires', '0')
    registry_remove(KEYS[5], KEYS[6], ARGV[2], now_ms)
end
-- A forced release is recorded apart: the evicted holder must learn that it lost the lock.
if forced then
    gone_add(KEYS[1], hid, 'X' .. hid .. '.' .. ARGV[6])
else
    gone_add(KEYS[1], hid, 'R' .. hid)
end
return 1

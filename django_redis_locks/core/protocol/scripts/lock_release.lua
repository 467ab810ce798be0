-- lock_release: release the lock if, and only if, it is held with the given token (or, for a
-- forced release, by the holder with the given id), handing it to the first live waiter; or
-- take a waiter that gives up out of the queue. Sent twice, it takes effect once.
--
-- KEYS[1]  <ns>:{b}:lock:<name>    lock hash (see lib/lock)
-- KEYS[2]  <ns>:{b}:lockq:<name>   queue: token -> ticket
-- KEYS[3]  <ns>:{b}:lockw:<name>   waiters: token -> ttl, session, slice, channel, meta
-- KEYS[4]  <ns>:{b}:lockl:<name>   leases: token -> expiry (ms) of a waiter's place
-- KEYS[5]  <ns>:{b}:reg:names      registry: members in name order
-- KEYS[6]  <ns>:{b}:reg:expiry     registry: member -> until when it is kept (ms)
-- KEYS[7]  <ns>:{b}:hot            contention figures of the bucket's names (lib/hot)
-- ARGV[1]  the holder's token, or with ARGV[2] = "holder" its holder id (the first 16 hex
--          digits of the token's SHA-1, as listings show it)
-- ARGV[2]  "token" (the holder releases, or a waiter gives up) or "holder" (forced release)
-- ARGV[3]  forced release: the request's id (random), so that it is recognised if resent
-- ARGV[4]  release by the holder: the fence of its hold ("": not checked). The token holding
--          with another fence holds a later grant (a late copy of its acquire, after the
--          holder's own hold ended): that grant is released too, and the reply says the
--          holder's hold was gone (0, or -2 if it was force-released)
--
-- The registry member ("lock:<name>") comes from KEYS[1]; a release leaves its entry (see
-- lib/registry) and a hand-over lists it only when the entry would not outlive the hash; wake-up messages go to the
-- waiter's own channel (see the wake-up format in wake_messages.py). A release that leaves the lock
-- free keeps only its fence, recent releases and average hold, q and l (see lib/lock).
--
-- Reply:
--    1  released (evicted, for a forced release)
--    3  that very release (or forced release request) happened already: this is a resend
--    2  the token was not holding but waiting: it left the queue
--    0  no live hold: it expired or was removed; nothing written (or, with a fence, the
--       token's later grant was released)
--   -1  held with another token (or another holder id); nothing written
--   -2  the token's hold was force-released; nothing written (or, with a fence, the
--       token's later grant was released)
-- @include hot
-- @include registry
-- @include lock
-- @include gone
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local forced = ARGV[2] == 'holder'
local member = lock_member(KEYS[1])

local held = redis.call('HMGET', KEYS[1], 'token', 'expires', 'fence', 'slice_end', 'told',
    'acquired', 'avg', 'gone', 'q', 'l', 'mn')
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
        hot_note(KEYS[7], member, now_ms, 'left')
        return 2
    end
    local kind, request = gone_in(held[8], hid)
    if kind == 'R' and not forced then
        return 3
    elseif kind == 'X' and not forced then
        return -2
    elseif kind == 'X' and request == ARGV[3] then
        return 3
    end
    if live then
        return -1
    end
    return 0
end

-- A later grant of the holder's token, not its hold: released all the same, but the holder
-- is told its own hold was gone, and an eviction on record stays on record.
local stale = not forced and ARGV[4] ~= '' and held[3] ~= ARGV[4]
local evicted = stale and gone_in(held[8], hid) == 'X'

-- Written to the hash below, with what the outcome needs: the recent releases (a forced
-- release is recorded apart: the evicted holder must learn that it lost the lock) and how
-- long holds last, for waiters' estimates (a moving average).
local fields
if forced then
    fields = {'gone', gone_with(held[8], hid, 'X' .. hid .. '.' .. ARGV[3])}
elseif evicted then
    fields = {'gone', held[8]}
elseif stale then
    fields = {'gone', gone_with(held[8], hid, 'R' .. hid)}
else
    fields = {'gone', gone_with(held[8], hid, 'R' .. hid)}
    local lasted = now_ms - tonumber(held[6] or now_ms)
    if held[7] then
        lasted = math.floor((tonumber(held[7]) * 3 + lasted) / 4)
    end
    held[7] = string.format('%.0f', lasted)
end
if held[7] then
    fields[#fields + 1] = 'avg'
    fields[#fields + 1] = held[7]
end

-- A hand-over released before it was confirmed leaves the queue, wherever its place is: the
-- head, as a rule, or behind it where a failover restored places written before the hand-over.
local head, record, waiting = lock_queue_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], now_ms,
    held[9])
if head and lock_dequeue(KEYS[2], KEYS[3], KEYS[4], holder) then
    if not forced then  -- a waiter handed the lock gave up before it confirmed it
        hot_note(KEYS[7], member, now_ms, 'left')
    end
    if head == holder then
        head, record, waiting = lock_queue_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], now_ms,
            waiting)
    end
end
if head then  -- a hold released while a waiter is due
    hot_note(KEYS[7], member, now_ms, 'held', now_ms - tonumber(held[6] or now_ms))
end
local slice_left = tonumber(held[4] or '0') - now_ms
if head and slice_left > 0 and not forced then
    -- The releasing session's slice runs on: keep the lock for it until the slice ends, and
    -- tell the first waiter (once per slice) when to try.
    redis.call('HSET', KEYS[1], 'expires', '0', 'reserved', held[4], 'told', held[4],
        unpack(fields))
    if held[5] ~= held[4] then
        local _, _, _, channel = lock_waiter(record)
        redis.call('PUBLISH', channel,
            member .. '#' .. string.sub(redis.sha1hex(head), 1, 16) .. '|' .. slice_left)
    end
elseif head then
    lock_hand_over(KEYS[1], KEYS[5], KEYS[6], member, head, record, now_ms, now_us,
        {fence = held[3], l = held[10], mn = held[11]})
    redis.call('HSET', KEYS[1], unpack(fields))
else
    -- Free: what stays of the name is its fence, recent releases and average hold, and q (set
    -- while waiters past the pruned ones may still be queued) and l (the registry entry stays,
    -- for the name's next hold; trimmed if a long hold ended early): the hold's fields are
    -- cleared in place. The hash expires when the hold's TTL and LOCK_RETENTION_MS have
    -- passed, as the grant set it (no command), or LOCK_RETENTION_MS from now if the hold had
    -- more than LOCK_RELEASE_SLACK_MS left.
    redis.call('HDEL', KEYS[1], unpack(lock_hold_fields(held[11])))
    local life = tonumber(held[2]) - now_ms + LOCK_RETENTION_MS
    if life > LOCK_RETENTION_MS + LOCK_RELEASE_SLACK_MS then
        redis.call('PEXPIRE', KEYS[1], LOCK_RETENTION_MS)
        life = LOCK_RETENTION_MS
    end
    local listed = registry_fit(KEYS[5], KEYS[6], member, held[10], now_ms + life, now_ms,
        true)
    if listed then
        fields[#fields + 1] = 'l'
        fields[#fields + 1] = listed
    end
    redis.call('HSET', KEYS[1], unpack(fields))
end
if evicted then
    return -2
elseif stale then
    return 0
end
return 1

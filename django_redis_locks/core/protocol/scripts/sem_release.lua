-- sem_release: give back a semaphore slot held with the given token, or leave the queue
-- (or, for a forced release, evict the holder with the given id). Sent twice, it takes
-- effect once.
--
-- KEYS[1]  <ns>:{b}:sem:<name>    holders: token -> expiry (ms)
-- KEYS[2]  <ns>:{b}:semq:<name>   queue: token -> ticket
-- KEYS[3]  <ns>:{b}:semw:<name>   leases: token -> expiry (ms)
-- KEYS[4]  <ns>:{b}:semi:<name>   info: limit, ticket, h:<token>, w:<token>, gone, avg, l, q
-- KEYS[5]  <ns>:{b}:reg:names     registry: members in name order
-- KEYS[6]  <ns>:{b}:reg:expiry    registry: member -> until when it is kept (ms)
-- KEYS[7]  <ns>:{b}:hot           contention figures of the bucket's names (lib/hot)
-- ARGV[1]  the holder's token, or with ARGV[2] = "holder" its holder id (the first 16 hex
--          digits of the token's SHA-1, as listings show it)
-- ARGV[2]  "token" (the holder releases or a waiter leaves) or "holder" (forced release)
-- ARGV[3]  forced release: the request's id (random), so that it is recognised if resent
-- ARGV[4]  release by the holder: the ticket of its slot ("": not checked). The token
--          holding a slot with another ticket holds a later admission (a late copy of its
--          acquire, after the holder's own hold ended): that slot is released too, and the
--          reply says the holder's slot was gone (0, or -2 if it was force-released)
--
-- The registry member ("sem:<name>"), also the start of wake-up messages (wake_messages.py), comes
-- from KEYS[1].
--
-- Reply:
--    1  the slot was released (evicted, for a forced release), and given to the next live
--       queued waiter, if any, who was told
--    3  that very release (or forced release request) happened already: this is a resend
--    2  the token was not holding but waiting: it left the queue
--    0  neither holding nor waiting (expired, or never admitted): nothing written (or, with
--       a ticket, the token's later admission was released)
--   -2  the token's slot was force-released: nothing written (or, with a ticket, the
--       token's later admission was released)
-- @include hot
-- @include registry
-- @include semaphore
-- @include gone
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local forced = ARGV[2] == 'holder'
local member = semaphore_member(KEYS[1])
local token, hid
if not forced then
    token = ARGV[1]
    hid = string.sub(redis.sha1hex(token), 1, 16)
end
local info = redis.call('HMGET', KEYS[4], 'gone', 'avg', 'l', 'q', 'h:' .. (token or ''))
local waiting = semaphore_waiting(KEYS[2], info[4])
-- One look at the holders: the token's slot, and the highest expiry of the others (``rest``,
-- 0: none; nil: unknown, see semaphore_keep); expired holders are dropped on the way.
local _, last, dropped, expires, rest = semaphore_look(KEYS[1], KEYS[4], now_ms, token)
if waiting then
    dropped = dropped + semaphore_prune_waiters(KEYS[2], KEYS[3], KEYS[4], now_ms)
    waiting = semaphore_waiting(KEYS[2], true)
end

if forced then
    hid = ARGV[1]
    for _, candidate in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf')) do
        if string.sub(redis.sha1hex(candidate), 1, 16) == hid then
            token = candidate
            break
        end
    end
    info[5] = token and redis.call('HGET', KEYS[4], 'h:' .. token)
    expires = token and tonumber(redis.call('ZSCORE', KEYS[1], token))
    rest = nil
end

local outcome = 0
local freed = false  -- a slot was given back (its holder's, or a later admission's)
local kept, forget = nil, nil
if not info[5] then  -- a holder has a record (h:<token>): no record, no slot
    expires = nil
end
if expires and expires > now_ms then
    -- A later admission of the holder's token, not its slot: released all the same, but
    -- the holder is told its own slot was gone, and an eviction on record stays on record.
    local stale = not forced and ARGV[4] ~= ''
        and semaphore_record_ticket(info[5]) ~= ARGV[4]
    local gone, avg = nil, info[2]
    if forced then
        gone = gone_with(info[1], hid, 'X' .. hid .. '.' .. ARGV[3])
    elseif stale and gone_in(info[1], hid) == 'X' then
        gone, outcome = info[1], -2
    elseif stale then
        gone, outcome = gone_with(info[1], hid, 'R' .. hid), 0
    else  -- how long holds last, for waiters' estimates (a moving average)
        gone = gone_with(info[1], hid, 'R' .. hid)
        avg = semaphore_average(info[5], info[2], now_ms)
    end
    if rest ~= 0 or waiting then  -- (else nobody is left: the keep below deletes the key)
        redis.call('ZREM', KEYS[1], token)
    end
    last = rest
    if waiting then  -- a slot released while waiters are queued
        hot_note(KEYS[7], member, now_ms, 'held',
            now_ms - tonumber(string.match(info[5], '^(%d+)') or now_ms))
    end
    if waiting and semaphore_dequeue(KEYS[2], KEYS[3], KEYS[4], token) then
        waiting = semaphore_waiting(KEYS[2], true)  -- admitted, and gave up unconfirmed
        if not forced then
            hot_note(KEYS[7], member, now_ms, 'left')
        end
    end
    kept, forget = {gone, avg}, 'h:' .. token
    if not stale then
        outcome = 1
    end
    freed = true
elseif not forced and waiting and semaphore_dequeue(KEYS[2], KEYS[3], KEYS[4], token) then
    waiting = semaphore_waiting(KEYS[2], true)
    outcome = 2
    hot_note(KEYS[7], member, now_ms, 'left')
else
    local kind, request = gone_in(info[1], hid)
    if kind == 'R' and not forced then
        outcome = 3
    elseif kind == 'X' and not forced then
        outcome = -2
    elseif kind == 'X' and request == ARGV[3] then
        outcome = 3
    end
    if dropped == 0 and not waiting then
        return outcome  -- nothing written
    end
end

if waiting and (freed or dropped > 0) then
    -- a slot is free (a waiter leaving frees none: were a slot free beside it, the admission
    -- that stopped at the bound on dead places left some, which this script's prune dropped)
    semaphore_admit(KEYS[1], KEYS[2], KEYS[3], KEYS[4], member, now_ms)
    waiting = semaphore_waiting(KEYS[2], true)
    last = nil
end
semaphore_keep(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], member, now_ms, waiting,
    info[3], info[4], kept, forget, last)
return outcome

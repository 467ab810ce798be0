-- sem_acquire: take a slot of a fair counting semaphore, or queue for one; also confirms a
-- slot that a release admitted this token to. One atomic step, clock from TIME (Redis in
-- Action 6.3.2 and 11.2.3, on server time).
--
-- KEYS[1]  <ns>:{b}:sem:<name>    holders: token -> expiry (ms)
-- KEYS[2]  <ns>:{b}:semq:<name>   queue: token -> ticket, arrival order of blocked waiters
-- KEYS[3]  <ns>:{b}:semw:<name>   leases: token -> expiry (ms) of a waiter's place
-- KEYS[4]  <ns>:{b}:semi:<name>   info: limit, ticket, h:<token>, w:<token>, gone, avg, l, q
-- KEYS[5]  <ns>:{b}:reg:names     registry: members in name order
-- KEYS[6]  <ns>:{b}:reg:expiry    registry: member -> until when it is kept (ms)
-- KEYS[7]  <ns>:{b}:hot           contention figures of the bucket's names (lib/hot)
-- ARGV[1]  token (random, >= 128 bits)
-- ARGV[2]  limit (>= 1)
-- ARGV[3]  holder ttl in milliseconds (> 0)
-- ARGV[4]  holder metadata (JSON text, stored as is)
-- ARGV[5]  "try": never queue; "queue": take (or keep) a place in the queue if not admitted
-- ARGV[6]  waiter lease in milliseconds ("queue" only): a queued waiter that does not come
--          back within it loses its place
-- ARGV[7]  the waiting process's wake-up channel ("<ns>:wake:<process id>"; "queue" only)
-- ARGV[8]  deadline: server time (ms) after which this request writes nothing (a copy that
--          reaches Redis late, see deadlines.py); 0: none
-- ARGV[9]  how long the caller has waited so far (ms; 0 on its first try): counted in the
--          contention figures when this ask ends a wait with a slot
--
-- The registry member ("sem:<name>"), also the start of wake-up messages (wake_messages.py), comes
-- from KEYS[1].
--
-- Reply:
--   {1, ticket, ttl_ms, now_ms, 0}   admitted
--   {1, ticket, ttl_ms, now_ms, 1}   already a holder with this very token: an admission by
--                                    a release, now confirmed for the full TTL (it leaves
--                                    the queue), or a resent acquire whose first reply was
--                                    lost; ttl_ms is what is left
--   {0, wait_ms, position, now_ms, estimate_ms}
--                                    not admitted: wait_ms is the time until the first
--                                    holder's TTL runs out (-1: no holder); position is the
--                                    1-based place in the queue (0: not queued);
--                                    estimate_ms how long until a slot is likely free (at
--                                    most wait_ms), from the lengths of recent holds (see
--                                    lib/estimate)
--   {-1, stored_limit}               the semaphore is in use with another limit: nothing
--                                    written
--   {-3, now_ms}                     the request came after its deadline: nothing written
--   {-4, now_ms}                     this token's hold was force-released (the recent
--                                    releases say so): an operator evicted it before its
--                                    caller learned of it, or this is a late copy of the
--                                    holder's acquire; the token is spent (only expired
--                                    holders and waiters were cleared)
--
-- Fairness: free slots go to queued waiters first, in ticket order (see lib/semaphore's
-- admission), and a newcomer takes a free slot only when every live queued waiter holds one;
-- releases admit queued waiters themselves. Expired holders never count, so the limit holds
-- however long a holder was paused. Every path that writes ends in semaphore_keep, so every
-- key lives as long as the last holder or waiter, and all four expire together.
-- @include estimate
-- @include hot
-- @include registry
-- @include semaphore
-- @include gone
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local deadline = tonumber(ARGV[8])
if deadline > 0 and now_ms > deadline then
    return {-3, now_ms}
end
local token = ARGV[1]
local limit = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local member = semaphore_member(KEYS[1])
local info = redis.call('HMGET', KEYS[4], 'limit', 'ticket', 'gone', 'l', 'q', 'h:' .. token)
local waiting = semaphore_waiting(KEYS[2], info[5])
-- ``last``: the highest expiry among the holders (0: none; nil: unknown, see semaphore_keep)
local holding, last, dropped, mine = semaphore_look(KEYS[1], KEYS[4], now_ms, token)
local wrote = dropped > 0
if waiting and semaphore_prune_waiters(KEYS[2], KEYS[3], KEYS[4], now_ms) > 0 then
    wrote = true
    waiting = semaphore_waiting(KEYS[2], true)
end

-- Whatever was written, every key then lives as long as the last holder or waiter, and the
-- info hash and registry entry at least as long.
local function finish(reply)
    if wrote then
        semaphore_keep(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], member, now_ms,
            waiting, info[4], info[5], nil, nil, last)
    end
    return reply
end

local open = true  -- no live queued waiter is without a slot: a newcomer may take a free one
if waiting then
    -- Free slots go to the queue first (possibly to this very caller), as a release would
    -- give them: a slot freed by an expiry, or one whose admitted waiter never confirmed it,
    -- never waits for a queued waiter that may be dead.
    local admitted
    open, admitted = semaphore_admit(KEYS[1], KEYS[2], KEYS[3], KEYS[4], member, now_ms)
    wrote = wrote or admitted
    waiting = semaphore_waiting(KEYS[2], true)
    if admitted then  -- (it may have admitted this very caller)
        info[6] = redis.call('HGET', KEYS[4], 'h:' .. token)
        mine = tonumber(redis.call('ZSCORE', KEYS[1], token) or '0')
        mine = mine > now_ms and mine or nil
        holding, last = semaphore_count(KEYS[1], now_ms), nil
    end
end
-- A holder has a record (h:<token>), which goes with its slot: no record, no slot to look at.
if info[6] and mine then
    local left = mine - now_ms
    if left < ttl then  -- confirm an admission (its short window) for the full TTL
        redis.call('ZADD', KEYS[1], 'XX', now_ms + ttl, token)
        left, wrote = ttl, true
        last = last and math.max(last, now_ms + ttl)
    end
    if waiting and semaphore_dequeue(KEYS[2], KEYS[3], KEYS[4], token) then
        wrote = true
        waiting = semaphore_waiting(KEYS[2], true)
        hot_note(KEYS[7], member, now_ms, 'waited', tonumber(ARGV[9]))
    end
    local ticket = semaphore_record_ticket(info[6]) or '0'
    return finish({1, ticket, left, now_ms, 1})
end

local queued = waiting and redis.call('ZSCORE', KEYS[2], token)
-- A token evicted by a forced release never holds or waits again: its holder must learn of
-- the eviction (at its next call), not find a slot granted to it anew by a late copy.
if info[3] and string.find(info[3], 'X', 1, true)
        and gone_in(info[3], string.sub(redis.sha1hex(token), 1, 16)) == 'X' then
    return finish({-4, now_ms})
end
local fields = {}  -- what to write to the info hash
if info[1] ~= ARGV[2] then
    if info[1] and (holding > 0 or waiting) then
        return finish({-1, tonumber(info[1])})
    end
    fields = {'limit', ARGV[2]}
end

if not queued and open and holding < limit then
    local ticket = semaphore_ticket(info[2], now_us)
    redis.call('ZADD', KEYS[1], now_ms + ttl, token)
    fields[#fields + 1] = 'ticket'
    fields[#fields + 1] = ticket
    fields[#fields + 1] = 'h:' .. token
    fields[#fields + 1] = string.format('%.0f', now_ms) .. ' ' .. ticket .. ' ' .. ARGV[4]
    redis.call('HSET', KEYS[4], unpack(fields))
    wrote = true
    last = last and math.max(last, now_ms + ttl)
    if tonumber(ARGV[9]) > 0 then
        hot_note(KEYS[7], member, now_ms, 'waited', tonumber(ARGV[9]))
    end
    return finish({1, ticket, ttl, now_ms, 0})
end

local position = 0
if ARGV[5] == 'queue' then
    if not queued then
        hot_note(KEYS[7], member, now_ms, 'queued')
        local ticket = semaphore_ticket(info[2], now_us)
        redis.call('ZADD', KEYS[2], ticket, token)
        fields[#fields + 1] = 'ticket'
        fields[#fields + 1] = ticket
        fields[#fields + 1] = 'w:' .. token
        fields[#fields + 1] = ARGV[3] .. ' ' .. ARGV[7] .. ' ' .. ARGV[4]
    end
    if not info[5] then  -- the queue may exist from now on (semaphore_waiting)
        fields[#fields + 1] = 'q'
        fields[#fields + 1] = '1'
        info[5] = '1'
    end
    if #fields > 0 then
        redis.call('HSET', KEYS[4], unpack(fields))
    end
    redis.call('ZADD', KEYS[3], now_ms + tonumber(ARGV[6]), token)
    position = redis.call('ZRANK', KEYS[2], token) + 1
    wrote, waiting = true, true
else
    hot_note(KEYS[7], member, now_ms, 'refused')
end
local first = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf', 'WITHSCORES',
    'LIMIT', 0, 1)
local wait_ms = -1
if first[2] then
    wait_ms = tonumber(first[2]) - now_ms
end
return finish({0, wait_ms, position, now_ms,
    semaphore_estimate(KEYS[1], KEYS[4], now_ms, wait_ms)})

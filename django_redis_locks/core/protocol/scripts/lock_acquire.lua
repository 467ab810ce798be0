-- lock_acquire: take the lock if it is free and no earlier waiter is due; else (when asked)
-- queue for it. Also confirms a hold that a release handed to this token. One atomic step,
-- clock from TIME.
--
-- KEYS[1]  <ns>:{b}:lock:<name>    lock hash (see lib/lock)
-- KEYS[2]  <ns>:{b}:lockq:<name>   queue: token -> ticket, arrival order of blocked waiters
-- KEYS[3]  <ns>:{b}:lockw:<name>   waiters: token -> ttl, session, slice, channel, meta
-- KEYS[4]  <ns>:{b}:lockl:<name>   leases: token -> expiry (ms) of a waiter's place
-- KEYS[5]  <ns>:{b}:reg:names      registry: members in name order
-- KEYS[6]  <ns>:{b}:reg:expiry     registry: member -> until when it is kept (ms)
-- KEYS[7]  <ns>:{b}:hot            contention figures of the bucket's names (lib/hot)
-- ARGV[1]  token (random, >= 128 bits)
-- ARGV[2]  ttl in milliseconds (> 0)
-- ARGV[3]  holder metadata (JSON text, stored as is)
-- ARGV[4]  "try": never queue; "queue": take (or keep) a place in the queue if not granted
-- ARGV[5]  waiter lease in milliseconds ("queue" only): a queued waiter that does not ask
--          again within it loses its place
-- ARGV[6]  session: who is asking (a process and thread, greenlet or task), for slices
-- ARGV[7]  slice in milliseconds (0: none)
-- ARGV[8]  the waiting process's wake-up channel ("<ns>:wake:<process id>"; "queue" only)
-- ARGV[9]  deadline: server time (ms) after which this request writes nothing (a copy that
--          reaches Redis late, see deadlines.py); 0: none
-- ARGV[10] how long the caller has waited so far (ms; 0 on its first try): counted in the
--          contention figures when this ask ends a wait with a grant
--
-- The registry member ("lock:<name>") comes from KEYS[1]; it is written only when the hash's l
-- says the entry would not outlive the hash (lib/registry). When the lock is free but an
-- earlier waiter is due, it is handed to that waiter (see lib/lock), as a release would.
--
-- Reply:
--   {1, fence, ttl_ms, now_ms, 0}  acquired
--   {1, fence, ttl_ms, now_ms, 1}  already held with this very token: a hand-over to this
--                                  waiter, now confirmed for the full TTL (it leaves the
--                                  queue), or a resent acquire whose first reply was lost;
--                                  ttl_ms is what is left
--   {0, holder_ttl_ms, position, now_ms, estimate_ms}
--                                  not acquired: holder_ttl_ms is how long the holder (or a
--                                  slice's reservation, or a hand-over to an earlier waiter)
--                                  keeps it, -1 when it is free;
--                                  position is the 1-based place in the queue (0: not queued);
--                                  estimate_ms how long until it is likely free (at most
--                                  holder_ttl_ms), from the lengths of recent holds (see
--                                  lib/estimate)
--   {-3, now_ms}                   the request came after its deadline: nothing written
--   {-4, now_ms}                   this token's hold was force-released (the name's recent
--                                  releases say so): an operator evicted it before its
--                                  caller learned of it, or this is a late copy of the
--                                  holder's acquire; nothing written, the token is spent
--
-- Fairness: blocked waiters are served in arrival order (a release hands the lock to the
-- first of them), and nobody takes a free lock while an earlier waiter is due, except the
-- session whose slice is running (see lib/lock).
-- @include estimate
-- @include hot
-- @include registry
-- @include lock
-- @include gone
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local deadline = tonumber(ARGV[9])
if deadline > 0 and now_ms > deadline then
    return {-3, now_ms}
end
local token = ARGV[1]
local ttl = tonumber(ARGV[2])
local member = lock_member(KEYS[1])

local held = redis.call('HMGET', KEYS[1], 'token', 'expires', 'fence', 'session', 'slice_end',
    'reserved', 'acquired', 'avg', 'gone', 'q', 'l', 'mn')
local waiting = held[10]
local holder_ttl = -1
if held[1] then
    holder_ttl = tonumber(held[2]) - now_ms
end
-- A token evicted by a forced release never holds or waits again: its holder must learn of
-- the eviction (at its next call), not find the name granted to it anew by a late copy.
if held[9] and string.find(held[9], 'X', 1, true) and not (held[1] == token and holder_ttl > 0)
        and gone_in(held[9], string.sub(redis.sha1hex(token), 1, 16)) == 'X' then
    return {-4, now_ms}
end
if held[1] and holder_ttl > 0 then
    if held[1] == token then
        if holder_ttl < ttl then  -- confirm a hand-over (its short window) for the full TTL
            local listed = lock_listing(KEYS[5], KEYS[6], member, held[11], ttl, now_ms)
            redis.call('HSET', KEYS[1], 'expires', string.format('%.0f', now_ms + ttl), 'l',
                listed or held[11])
            redis.call('PEXPIRE', KEYS[1], ttl + LOCK_RETENTION_MS)
            holder_ttl = ttl
        end
        -- A confirmed hand-over leaves the queue (a resend of the confirmation finds it gone).
        if lock_dequeue(KEYS[2], KEYS[3], KEYS[4], token) then
            hot_note(KEYS[7], member, now_ms, 'waited', tonumber(ARGV[10]))
        end
        return {1, held[3], holder_ttl, now_ms, 1}
    end
else
    local reserved = tonumber(held[6] or '0') - now_ms
    local mine = held[4] == ARGV[6]
    if reserved > 0 and not mine then
        holder_ttl = reserved
    else
        local head, record = nil, nil
        if reserved <= 0 then
            head, record, waiting = lock_queue_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], now_ms,
                waiting)
        end
        if not head or head == token then
            local waited = tonumber(ARGV[10]) > 0
            if head or reserved > 0 then  -- (the session's token may be queued: it leaves)
                waited = lock_dequeue(KEYS[2], KEYS[3], KEYS[4], token) or waited
            end
            if waited then
                hot_note(KEYS[7], member, now_ms, 'waited', tonumber(ARGV[10]))
            end
            local slice_end = now_ms + tonumber(ARGV[7])
            if reserved > 0 then
                slice_end = tonumber(held[5])  -- the session's slice goes on
            end
            local fence = lock_next_fence(held[3], now_us)
            local listed = lock_listing(KEYS[5], KEYS[6], member, held[11], ttl, now_ms)
            lock_grant(KEYS[1], token, ttl, ARGV[3], now_ms, fence, ARGV[6], slice_end,
                {l = listed or held[11], mn = held[12]})
            return {1, fence, ttl, now_ms, 0}
        end
        -- Free, but an earlier waiter is due: hand it over now, as a release would have (a
        -- dead waiter then keeps it for the window only, not until its place runs out).
        holder_ttl = lock_hand_over(KEYS[1], KEYS[5], KEYS[6], member, head, record, now_ms,
            now_us, {fence = held[3], l = held[11], mn = held[12]})
    end
end
local position = 0
if ARGV[4] == 'queue' then
    local new
    position, new = lock_enqueue(KEYS[1], KEYS[2], KEYS[3], KEYS[4], token, now_ms, now_us,
        tonumber(ARGV[5]),
        ARGV[2] .. ' ' .. ARGV[6] .. ' ' .. ARGV[7] .. ' ' .. ARGV[8] .. ' ' .. ARGV[3], waiting)
    if new then
        hot_note(KEYS[7], member, now_ms, 'queued')
    end
else
    hot_note(KEYS[7], member, now_ms, 'refused')
end
-- How long until the name is likely free (lib/estimate), at most the holder's TTL; no live
-- holder (a slice's reservation, or a hand-over to an earlier waiter): that TTL.
local estimate = holder_ttl
if held[1] and held[1] ~= token and tonumber(held[2]) > now_ms then
    local held_ms = now_ms - tonumber(held[7] or now_ms)
    estimate = math.min(estimate_left(held[8] and tonumber(held[8]), held_ms), holder_ttl)
end
return {0, holder_ttl, position, now_ms, estimate}

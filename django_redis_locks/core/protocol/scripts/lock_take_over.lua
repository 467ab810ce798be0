-- lock_take_over: give a live hold to a new token: the hold one owner handed off (a ticket:
-- its token and fence) becomes another owner's, with a new token, fence, TTL, metadata and
-- session. The old token holds nothing after it, so a ticket is taken over once: a second
-- owner with the same ticket (a task delivered twice) is refused. Sent twice, a take-over
-- counts once (the new token holds already: granted again, nothing written).
--
-- KEYS[1]  <ns>:{b}:lock:<name>   lock hash (see lib/lock)
-- KEYS[2]  <ns>:{b}:reg:names     registry: members in name order
-- KEYS[3]  <ns>:{b}:reg:expiry    registry: member -> until when it is kept (ms)
-- ARGV[1]  the ticket's token (the hold handed off)
-- ARGV[2]  the ticket's fence (the hold's, as its owner learned it)
-- ARGV[3]  the new token (random, >= 128 bits)
-- ARGV[4]  the new TTL in milliseconds (> 0)
-- ARGV[5]  the new holder's metadata (JSON text, stored as is)
-- ARGV[6]  the new holder's session (see lock_acquire; its slice is over at once)
--
-- Waiters queued for the name stay queued: the hold goes on, under another owner.
--
-- Reply:
--   {1, fence, ttl_ms, now_ms, 0}  taken over: the new token holds with a new fence
--   {1, fence, ttl_ms, now_ms, 1}  the new token holds already (a resend); ttl_ms is what is
--                                  left
--   {0}                            the ticket's hold is gone: it expired, was released, or
--                                  was taken over already (or the fence is another grant's);
--                                  nothing written
--   {-2}                           the ticket's hold was force-released; nothing written
-- @include registry
-- @include lock
-- @include gone
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local held = redis.call('HMGET', KEYS[1], 'token', 'expires', 'fence', 'l', 'mn', 'gone')
local left = held[1] and (tonumber(held[2]) - now_ms) or 0
if left > 0 and held[1] == ARGV[3] then
    return {1, held[3], left, now_ms, 1}
end
if left <= 0 or held[1] ~= ARGV[1] or held[3] ~= ARGV[2] then
    if gone_in(held[6], string.sub(redis.sha1hex(ARGV[1]), 1, 16)) == 'X' then
        return {-2}
    end
    return {0}
end
local ttl = tonumber(ARGV[4])
local listed = lock_listing(KEYS[2], KEYS[3], lock_member(KEYS[1]), held[4], ttl, now_ms)
    or held[4]
local fence = lock_next_fence(held[3], now_us)
lock_grant(KEYS[1], ARGV[3], ttl, ARGV[5], now_ms, fence, ARGV[6], now_ms,
    {l = listed, mn = held[5]})
return {1, fence, ttl, now_ms, 0}

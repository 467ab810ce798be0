-- sem_refresh: give a semaphore holder a fresh TTL (Redis in Action 6.3.3), if it still
-- holds its slot. A holder whose TTL ran out is never revived, even before it was pruned.
-- Sent twice, it has the effect of one (the TTL counts from the later run).
--
-- KEYS[1]  <ns>:{b}:sem:<name>    holders: token -> expiry (ms)
-- KEYS[2]  <ns>:{b}:semq:<name>   queue: token -> ticket
-- KEYS[3]  <ns>:{b}:semw:<name>   leases: token -> expiry (ms)
-- KEYS[4]  <ns>:{b}:semi:<name>   info: limit, ticket, h:<token> -> holder record, gone, l, q
-- KEYS[5]  <ns>:{b}:reg:names     registry: members in name order
-- KEYS[6]  <ns>:{b}:reg:expiry    registry: member -> until when it is kept (ms)
-- ARGV[1]  token
-- ARGV[2]  new ttl in milliseconds (> 0), counted from now
-- ARGV[3]  the ticket of the caller's slot ("": not checked): the token holding a slot with
--          another ticket holds a later admission, made by a late copy of its acquire after
--          the caller's hold ended (see deadlines.py), and is not the caller's to refresh
--
-- The registry member ("sem:<name>") comes from KEYS[1].
--
-- Reply:
--   {1, ttl_ms, now_ms}  refreshed
--   {0}                  not a holder (expired or released; or a holder with another
--                        ticket than the caller's): nothing written
--   {-2}                 its slot was force-released: nothing written
-- @include registry
-- @include semaphore
-- @include gone
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local info = redis.call('HMGET', KEYS[4], 'h:' .. ARGV[1], 'gone', 'l', 'q')
-- A holder has a record (h:<token>), which goes with its slot: no record, no slot.
local expires = info[1] and redis.call('ZSCORE', KEYS[1], ARGV[1])
if expires and ARGV[3] ~= '' and semaphore_record_ticket(info[1]) ~= ARGV[3] then
    expires = nil  -- a later admission of the token: not the caller's slot
end
if not expires or tonumber(expires) <= now_ms then
    if gone_in(info[2], string.sub(redis.sha1hex(ARGV[1]), 1, 16)) == 'X' then
        return {-2}
    end
    return {0}
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', now_ms + ttl, ARGV[1])
semaphore_keep(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], semaphore_member(KEYS[1]),
    now_ms, semaphore_waiting(KEYS[2], info[4]), info[3], info[4])
return {1, ttl, now_ms}

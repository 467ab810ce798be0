-- sem_state: how many hold and wait, the limit, and whether the given token holds a slot.
-- Writes nothing; holders and waiters whose time ran out are not counted.
--
-- KEYS[1]  <ns>:{b}:sem:<name>    holders: token -> expiry (ms)
-- KEYS[2]  <ns>:{b}:semq:<name>   queue: token -> ticket
-- KEYS[3]  <ns>:{b}:semw:<name>   leases: token -> expiry (ms)
-- KEYS[4]  <ns>:{b}:semi:<name>   info: limit, ticket, h:<token> -> holder record
-- ARGV[1]  token to look for ("" when the caller holds nothing)
--
-- Reply:
--   {count, limit, waiting, ttl_ms, now_ms, ticket}
--                       limit is 0 when nobody holds or waits; ttl_ms is the token's
--                       remaining life, -1 if it holds no slot; ticket that of the token's
--                       slot (its holder record), "" if it holds none
-- @include semaphore
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local count = redis.call('ZCOUNT', KEYS[1], '(' .. now_ms, '+inf')
local waiting = redis.call('ZCOUNT', KEYS[3], '(' .. now_ms, '+inf')
local limit = 0
if count + waiting > 0 then
    limit = tonumber(redis.call('HGET', KEYS[4], 'limit') or '0')
end
local ttl, ticket = -1, ''
local mine = ARGV[1] ~= '' and redis.call('ZSCORE', KEYS[1], ARGV[1])
if mine and tonumber(mine) > now_ms then
    ttl = tonumber(mine) - now_ms
    local record = redis.call('HGET', KEYS[4], 'h:' .. ARGV[1]) or ''
    ticket = semaphore_record_ticket(record) or ''
end
return {count, limit, waiting, ttl, now_ms, ticket}

-- lock_state: read a lock's state, and whether the given token holds it. Writes nothing.
--
-- KEYS[1]  <ns>:{b}:lock:<name>   lock hash (see lib/lock)
-- ARGV[1]  token to compare ("" when the caller holds nothing)
--
-- Reply:
--   {0}                          free (no token, or its hold expired)
--   {1, owned, ttl_ms, fence}    held; owned is 1 when ARGV[1] is the holder's token, else 0
local held = redis.call('HMGET', KEYS[1], 'token', 'expires', 'fence')
if not held[1] then
    return {0}
end
local t = redis.call('TIME')
local ttl = tonumber(held[2]) - (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if ttl <= 0 then
    return {0}
end
local owned = 0
if held[1] == ARGV[1] then owned = 1 end
return {1, owned, ttl, held[3]}

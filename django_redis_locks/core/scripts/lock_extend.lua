-- lock_extend: add to, or replace, the remaining life of a lock held with the given token.
--
-- KEYS[1]  <ns>:{b}:lock:<name>   lock hash
-- KEYS[2]  <ns>:{b}:reg:names     registry: members in name order
-- KEYS[3]  <ns>:{b}:reg:expiry    registry: member -> expiry (ms)
-- ARGV[1]  token
-- ARGV[2]  milliseconds (> 0)
-- ARGV[3]  "add": new life = remaining + ARGV[2]
--          "set": new life = ARGV[2]
--          "max": new life = the larger of remaining and ARGV[2] (renewals never shorten)
-- ARGV[4]  registry member ("lock:<name>")
-- ARGV[5]  upper bound of the new life in milliseconds
--
-- Reply:
--   {1, new_ttl_ms, now_ms}  extended
--   {0}                      no lock: it expired or was removed; nothing written
--   {-1}                     held with another token; nothing written
-- @include registry
local current = redis.call('HGET', KEYS[1], 'token')
if not current then
    return {0}
end
if current ~= ARGV[1] then
    return {-1}
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
if ARGV[3] ~= 'set' then
    local pttl = redis.call('PTTL', KEYS[1])
    if ARGV[3] == 'add' then
        if pttl > 0 then ttl = ttl + pttl end
    elseif pttl > ttl then
        ttl = pttl
    end
end
local cap = tonumber(ARGV[5])
if ttl > cap then ttl = cap end
local expires = now_ms + ttl
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('HSET', KEYS[1], 'expires', string.format('%.0f', expires))
registry_set(KEYS[2], KEYS[3], ARGV[4], expires, now_ms, false)
return {1, ttl, now_ms}

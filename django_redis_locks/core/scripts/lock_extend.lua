-- lock_extend: add to, or replace, the remaining life of a lock held with the given token.
-- Sent twice, an extend counts once.
--
-- KEYS[1]  <ns>:{b}:lock:<name>   lock hash (see lib/lock)
-- KEYS[2]  <ns>:{b}:reg:names     registry: members in name order
-- KEYS[3]  <ns>:{b}:reg:expiry    registry: member -> expiry (ms)
-- ARGV[1]  token
-- ARGV[2]  milliseconds (> 0)
-- ARGV[3]  "add": new life = remaining + ARGV[2]
--          "set": new life = ARGV[2]
--          "max": new life = the larger of remaining and ARGV[2] (renewals never shorten)
-- ARGV[4]  registry member ("lock:<name>")
-- ARGV[5]  upper bound of the new life in milliseconds
-- ARGV[6]  retention in milliseconds: how long the fence outlives the hold
-- ARGV[7]  sequence number of this extend among the hold's extends (1, 2, ...): one that is
--          not larger than the last applied is a resend, and changes nothing; 0: no sequence
--          (renewals, which may run any number of times)
--
-- Reply:
--   {1, new_ttl_ms, now_ms}  extended (for a resend: the life it has now)
--   {0}                      no live hold: it expired or was removed; nothing written
--   {-1}                     held with another token; nothing written
--   {-2}                     the token's hold was force-released; nothing written
-- @include registry
-- @include gone
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = redis.call('HMGET', KEYS[1], 'token', 'expires', 'xseq')
local live = held[1] and tonumber(held[2]) > now_ms
if not live or held[1] ~= ARGV[1] then
    if gone_kind(KEYS[1], string.sub(redis.sha1hex(ARGV[1]), 1, 16)) == 'X' then
        return {-2}
    end
    return live and {-1} or {0}
end
local remaining = tonumber(held[2]) - now_ms
local seq = tonumber(ARGV[7])
if seq > 0 and seq <= tonumber(held[3] or '0') then
    return {1, remaining, now_ms}
end
local ttl = tonumber(ARGV[2])
if ARGV[3] == 'add' then
    ttl = ttl + remaining
elseif ARGV[3] == 'max' and remaining > ttl then
    ttl = remaining
end
local cap = tonumber(ARGV[5])
if ttl > cap then ttl = cap end
redis.call('HSET', KEYS[1], 'expires', string.format('%.0f', now_ms + ttl))
if seq > 0 then
    redis.call('HSET', KEYS[1], 'xseq', ARGV[7])
end
redis.call('PEXPIRE', KEYS[1], ttl + tonumber(ARGV[6]))
registry_set(KEYS[2], KEYS[3], ARGV[4], now_ms + ttl, now_ms, false)
return {1, ttl, now_ms}

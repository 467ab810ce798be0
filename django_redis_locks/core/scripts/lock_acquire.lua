-- lock_acquire: take the lock if it is free; one atomic step, clock from TIME.
--
-- KEYS[1]  <ns>:{b}:lock:<name>     lock hash (token, fence, acquired, expires, meta)
-- KEYS[2]  <ns>:{b}:fence:<name>    hash: fence (last number handed out), released (last token)
-- KEYS[3]  <ns>:{b}:wait:<name>     "someone waits" flag, set on contention
-- KEYS[4]  <ns>:{b}:reg:names       registry: members in name order
-- KEYS[5]  <ns>:{b}:reg:expiry      registry: member -> expiry (ms)
-- ARGV[1]  token (random, >= 128 bits)
-- ARGV[2]  ttl in milliseconds (> 0)
-- ARGV[3]  holder metadata (JSON text, stored as is)
-- ARGV[4]  registry member ("lock:<name>")
-- ARGV[5]  fence retention in milliseconds (how long the fence key outlives the lock)
--
-- Reply:
--   {1, fence, ttl_ms, now_ms, 0}  acquired
--   {1, fence, pttl_ms, now_ms, 1} already held with this very token (a retried acquire whose
--                                  first reply was lost): nothing written
--   {0, pttl_ms}                   held by another token; pttl_ms is its remaining life
--
-- Fencing: fence = max(last + 1, server time in microseconds), so numbers keep increasing
-- across a restart that lost the data, as long as the server clock does not step back.
-- @include registry
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local current = redis.call('HGET', KEYS[1], 'token')
if current then
    local pttl = redis.call('PTTL', KEYS[1])
    if current == ARGV[1] then
        return {1, redis.call('HGET', KEYS[1], 'fence'), pttl, now_ms, 1}
    end
    local flag_ms = pttl
    if flag_ms < 0 then flag_ms = 0 end
    redis.call('SET', KEYS[3], '1', 'PX', flag_ms + 1000)
    return {0, pttl}
end

local ttl = tonumber(ARGV[2])
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fence = tonumber(redis.call('HGET', KEYS[2], 'fence') or '0') + 1
if fence < now_us then fence = now_us end
fence = string.format('%.0f', fence)
local expires = now_ms + ttl

redis.call('HSET', KEYS[2], 'fence', fence)
redis.call('PEXPIRE', KEYS[2], ttl + tonumber(ARGV[5]))
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', fence,
    'acquired', string.format('%.0f', now_ms), 'expires', string.format('%.0f', expires),
    'meta', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ttl)
registry_set(KEYS[4], KEYS[5], ARGV[4], expires, now_ms, false)
return {1, fence, ttl, now_ms, 0}

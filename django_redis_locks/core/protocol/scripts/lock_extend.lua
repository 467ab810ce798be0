-- lock_extend: add to, or replace, the remaining life of a lock held with the given token.
-- Sent twice, an extend counts once.
--
-- KEYS[1]  <ns>:{b}:lock:<name>   lock hash (see lib/lock)
-- KEYS[2]  <ns>:{b}:reg:names     registry: members in name order
-- KEYS[3]  <ns>:{b}:reg:expiry    registry: member -> until when it is kept (ms)
-- ARGV[1]  token
-- ARGV[2]  milliseconds (> 0)
-- ARGV[3]  "add": new life = remaining + ARGV[2]
--          "set": new life = ARGV[2]
--          "max": new life = the larger of remaining and ARGV[2] (renewals never shorten)
-- ARGV[4]  upper bound of the new life in milliseconds
-- ARGV[5]  sequence number of this extend among the hold's extends (1, 2, ...): one that is
--          not larger than the last applied is a resend, and changes nothing; 0: no sequence
--          (renewals, which may run any number of times)
-- ARGV[6]  the fence of the caller's hold ("": not checked): the token holding with another
--          fence holds a later grant, made by a late copy of its acquire after the caller's
--          hold ended (see deadlines.py), and is not the caller's to extend
--
-- The registry member ("lock:<name>") comes from KEYS[1]; it is written only when the hash's l
-- says the entry would not outlive the extended hash (lib/registry).
--
-- Reply:
--   {1, new_ttl_ms, now_ms}  extended (for a resend: the life it has now)
--   {0}                      no live hold: it expired or was removed (or the token holds
--                            a later grant than the caller's, another fence); nothing
--                            written
--   {-1}                     held with another token; nothing written
--   {-2}                     the token's hold was force-released; nothing written
-- @include registry
-- @include lock
-- @include gone
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = redis.call('HMGET', KEYS[1], 'token', 'expires', 'xseq', 'gone', 'fence', 'l')
local live = held[1] and tonumber(held[2]) > now_ms
local mine = live and held[1] == ARGV[1]
if not mine or (ARGV[6] ~= '' and held[5] ~= ARGV[6]) then
    if gone_in(held[4], string.sub(redis.sha1hex(ARGV[1]), 1, 16)) == 'X' then
        return {-2}
    end
    return (live and not mine) and {-1} or {0}
end
local remaining = tonumber(held[2]) - now_ms
local seq = tonumber(ARGV[5])
if seq > 0 and seq <= tonumber(held[3] or '0') then
    return {1, remaining, now_ms}
end
local ttl = tonumber(ARGV[2])
if ARGV[3] == 'add' then
    ttl = ttl + remaining
elseif ARGV[3] == 'max' and remaining > ttl then
    ttl = remaining
end
local cap = tonumber(ARGV[4])
if ttl > cap then ttl = cap end
local listed = lock_listing(KEYS[2], KEYS[3], lock_member(KEYS[1]), held[6], ttl, now_ms)
    or held[6]
if seq > 0 then
    redis.call('HSET', KEYS[1], 'expires', string.format('%.0f', now_ms + ttl), 'l', listed,
        'xseq', ARGV[5])
else
    redis.call('HSET', KEYS[1], 'expires', string.format('%.0f', now_ms + ttl), 'l', listed)
end
redis.call('PEXPIRE', KEYS[1], ttl + LOCK_RETENTION_MS)
return {1, ttl, now_ms}

-- lock_release: delete the lock if, and only if, it is held with the given token (or, for a
-- forced release, by the holder with the given id).
--
-- KEYS[1]  <ns>:{b}:lock:<name>   lock hash
-- KEYS[2]  <ns>:{b}:fence:<name>  hash: fence, released (the last token released)
-- KEYS[3]  <ns>:{b}:wait:<name>   "someone waits" flag
-- KEYS[4]  <ns>:{b}:reg:names     registry: members in name order
-- KEYS[5]  <ns>:{b}:reg:expiry    registry: member -> expiry (ms)
-- ARGV[1]  the holder's token, or with ARGV[5] = "holder" its holder id (the first 16 hex
--          digits of the token's SHA-1, as listings show it)
-- ARGV[2]  registry member ("lock:<name>"), also the wake-up message
-- ARGV[3]  wake-up channel ("<ns>:wake")
-- ARGV[4]  fence retention in milliseconds
-- ARGV[5]  "token" (the holder releases) or "holder" (an operator forces the release)
--
-- Reply:
--    1  released (waiters, if any, were told on the channel), or this token's release had
--       already happened: a retried release whose first reply was lost
--    0  no lock: it expired or was removed; nothing written
--   -1  held with another token (or another holder id); nothing written
-- @include registry
local current = redis.call('HGET', KEYS[1], 'token')
local forced = ARGV[5] == 'holder'
local match
if forced then
    match = current and string.sub(redis.sha1hex(current), 1, 16) == ARGV[1]
else
    match = current == ARGV[1]
end
if not match then
    if not forced and redis.call('HGET', KEYS[2], 'released') == ARGV[1] then
        return 1
    end
    if not current then
        return 0
    end
    return -1
end
redis.call('DEL', KEYS[1])
if not forced then
    -- A forced release is not recorded: the evicted holder must learn it lost the lock.
    redis.call('HSET', KEYS[2], 'released', ARGV[1])
end
if redis.call('PTTL', KEYS[2]) < 0 then
    redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[4]))
end
registry_remove(KEYS[4], KEYS[5], ARGV[2])
if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('PUBLISH', ARGV[3], ARGV[2])
end
return 1

-- lock_release: delete the lock if, and only if, it is held with the given token.
--
-- KEYS[1]  <ns>:{b}:lock:<name>   lock hash
-- KEYS[2]  <ns>:{b}:fence:<name>  hash: fence, released (the last token released)
-- KEYS[3]  <ns>:{b}:wait:<name>   "someone waits" flag
-- KEYS[4]  <ns>:{b}:registry      ZSET member -> expiry (ms)
-- ARGV[1]  token
-- ARGV[2]  registry member ("lock:<name>"), also the wake-up message
-- ARGV[3]  wake-up channel ("<ns>:wake")
-- ARGV[4]  fence retention in milliseconds
--
-- Reply:
--    1  released (waiters, if any, were told on the channel), or this token's release had
--       already happened: a retried release whose first reply was lost
--    0  no lock: it expired or was removed; nothing written
--   -1  held with another token; nothing written
local current = redis.call('HGET', KEYS[1], 'token')
if current ~= ARGV[1] then
    if redis.call('HGET', KEYS[2], 'released') == ARGV[1] then
        return 1
    end
    if not current then
        return 0
    end
    return -1
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'released', ARGV[1])
if redis.call('PTTL', KEYS[2]) < 0 then
    redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[4]))
end
redis.call('ZREM', KEYS[4], ARGV[2])
if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('PUBLISH', ARGV[3], ARGV[2])
end
return 1

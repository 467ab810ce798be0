-- lock_state: read a lock's state, and whether the given token holds it. Writes nothing.
--
-- KEYS[1]  <ns>:{b}:lock:<name>   lock hash
-- ARGV[1]  token to compare ("" when the caller holds nothing)
--
-- Reply:
--   {0}                       free
--   {1, owned, pttl_ms, fence}  held; owned is 1 when ARGV[1] is the holder's token, else 0
local current = redis.call('HGET', KEYS[1], 'token')
if not current then
    return {0}
end
local owned = 0
if current == ARGV[1] then owned = 1 end
return {1, owned, redis.call('PTTL', KEYS[1]), redis.call('HGET', KEYS[1], 'fence')}

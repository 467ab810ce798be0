-- lock_inspect: describe locks for listings, without revealing their tokens. Writes nothing.
--
-- KEYS[1] .. KEYS[n]  lock hashes (<ns>:{b}:lock:<name>), all in one slot
--
-- Reply:
--   {now_ms, entry_1, ..., entry_n}, each entry
--     {}                                                         the lock is free
--     {holder_id, fence, acquired_ms, expires_ms, ttl_ms, meta}  held; holder_id is the
--                                                                first 16 hex digits of the
--                                                                token's SHA-1
-- @include lock
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local reply = {now_ms}
for i = 1, #KEYS do
    local v = redis.call('HMGET', KEYS[i], 'token', 'fence', 'acquired', 'expires', 'mn', 'meta')
    local ttl = v[1] and tonumber(v[4]) - now_ms or 0
    if ttl > 0 then
        reply[i + 1] = {string.sub(redis.sha1hex(v[1]), 1, 16), v[2], v[3], v[4], ttl,
            lock_metadata(KEYS[i], v[5], v[6])}
    else
        reply[i + 1] = {}
    end
end
return reply

-- lock_inspect: describe locks, their holders and waiters, for listings, without revealing
-- tokens. Writes nothing.
--
-- KEYS[1] .. KEYS[4n]  four keys per lock: its hash, queue, waiters and leases keys (see
--                      lib/lock), all locks in one slot
-- ARGV[1]              most waiters described per lock
--
-- Reply:
--   {now_ms, entry_1, ..., entry_n}, each entry
--     {}  the lock is free
--     {holder_id, fence, acquired_ms, expires_ms, ttl_ms, meta, waiting, waiter_1, ...}
--         held; holder_id is the first 16 hex digits of the token's SHA-1; waiting: how many
--         wait (places still leased; a waiter the lock is handed to holds it, and is left
--         out); then the first ARGV[1] of them in queue order, each
--         {holder_id, queued_ms, lease_ms, meta}: the id its hold will have, when it came
--         (server time), until when its place is kept unless it asks again
-- @include lock
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local most = tonumber(ARGV[1] or '0')
local reply = {now_ms}

for i = 1, #KEYS, 4 do
    local v = redis.call('HMGET', KEYS[i], 'token', 'fence', 'acquired', 'expires', 'mn', 'meta',
        'q')
    local ttl = v[1] and tonumber(v[4]) - now_ms or 0
    local entry = {}
    if ttl > 0 then
        entry = {string.sub(redis.sha1hex(v[1]), 1, 16), v[2], v[3], v[4], ttl,
            lock_metadata(KEYS[i], v[5], v[6])}
        local queued = {0}
        if v[7] then  -- q unset: nobody waits, and the queue is not looked at
            queued = lock_waiters_listed(KEYS[i + 1], KEYS[i + 2], KEYS[i + 3], v[1], now_ms,
                most)
        end
        for _, part in ipairs(queued) do
            entry[#entry + 1] = part
        end
    end
    reply[#reply + 1] = entry
end
return reply

-- sem_inspect: describe semaphores, their holders and waiters, for listings, without revealing
-- tokens. Writes nothing; holders and waiters whose time ran out are left out.
--
-- KEYS[1] .. KEYS[4n]  four keys per semaphore: its holders, queue, leases and info keys
--                      (see sem_acquire), all semaphores in one slot
-- ARGV[1]              most waiters described per semaphore
--
-- Reply:
--   {now_ms, entry_1, ..., entry_n}, each entry
--     {limit, waiting, holder_1, ..., holder_k, waiters}  limit is 0 when nobody holds or
--       waits; each holder {holder_id, acquired_ms, expires_ms, ticket, meta}, in order of
--       expiry; holder_id is the first 16 hex digits of the token's SHA-1; waiters is a
--       list of the first ARGV[1] waiters in queue order, each
--       {holder_id, ticket, lease_ms, meta} (a waiter admitted to a slot holds it, and is
--       left out; the ticket is about its arrival, server time in microseconds)
-- @include semaphore
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local most = tonumber(ARGV[1] or '0')
local reply = {now_ms}

for i = 1, #KEYS, 4 do
    local live = redis.call('ZRANGEBYSCORE', KEYS[i], '(' .. now_ms, '+inf', 'WITHSCORES')
    local waiting = redis.call('ZCOUNT', KEYS[i + 2], '(' .. now_ms, '+inf')
    local entry = {0, waiting}
    if #live > 0 or waiting > 0 then
        entry[1] = tonumber(redis.call('HGET', KEYS[i + 3], 'limit') or '0')
    end
    for j = 1, #live, 2 do
        local record = redis.call('HGET', KEYS[i + 3], 'h:' .. live[j]) or ''
        local acquired, ticket, meta = string.match(record, '^(%d+) (%d+) (.*)$')
        entry[#entry + 1] = {string.sub(redis.sha1hex(live[j]), 1, 16), acquired or '0',
            live[j + 1], ticket or '0', meta or '{}'}
    end
    entry[#entry + 1] = waiting > 0
        and semaphore_waiters_listed(KEYS[i], KEYS[i + 1], KEYS[i + 2], KEYS[i + 3], now_ms, most)
        or {}
    reply[#reply + 1] = entry
end
return reply

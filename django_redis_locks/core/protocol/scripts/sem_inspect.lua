-- sem_inspect: describe semaphores and their holders for listings, without revealing tokens.
-- Writes nothing; holders and waiters whose time ran out are left out.
--
-- KEYS[1] .. KEYS[4n]  four keys per semaphore: its holders, queue, leases and info keys
--                      (see sem_acquire), all semaphores in one slot
--
-- Reply:
--   {now_ms, entry_1, ..., entry_n}, each entry
--     {limit, waiting, holder_1, ..., holder_k}  limit is 0 when nobody holds or waits; each
--       holder {holder_id, acquired_ms, expires_ms, ticket, meta}, in order of expiry;
--       holder_id is the first 16 hex digits of the token's SHA-1
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
    reply[#reply + 1] = entry
end
return reply

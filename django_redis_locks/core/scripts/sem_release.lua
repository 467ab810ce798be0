-- sem_release: give back a semaphore slot held with the given token, or leave the queue
-- (or, for a forced release, evict the holder with the given id).
--
-- KEYS[1]  <ns>:{b}:sem:<name>    holders: token -> expiry (ms)
-- KEYS[2]  <ns>:{b}:semq:<name>   queue: token -> ticket
-- KEYS[3]  <ns>:{b}:semw:<name>   leases: token -> expiry (ms)
-- KEYS[4]  <ns>:{b}:semi:<name>   info: limit, ticket, h:<token> -> holder record
-- KEYS[5]  <ns>:{b}:reg:names     registry: members in name order
-- KEYS[6]  <ns>:{b}:reg:expiry    registry: member -> expiry (ms)
-- ARGV[1]  the holder's token, or with ARGV[2] = "holder" its holder id (the first 16 hex
--          digits of the token's SHA-1, as listings show it)
-- ARGV[2]  "token" (the holder releases or a waiter leaves) or "holder" (forced release)
-- ARGV[3]  registry member ("sem:<name>"); waiters admitted here are told, on their own
--          process's channel, with "<member>#<holder id>|<ticket>|<ttl ms>"
--
-- Reply:
--    1  the slot was released (and given to the next queued waiter, if any, who was told)
--    2  the token was not holding but waiting: it left the queue
--    0  neither holding nor waiting (expired, released before, or evicted): nothing written
-- @include registry
-- @include semaphore
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dropped = semaphore_prune(KEYS[1], KEYS[2], KEYS[3], KEYS[4], now_ms)

local token = ARGV[1]
if ARGV[2] == 'holder' then
    token = nil
    for _, candidate in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
        if string.sub(redis.sha1hex(candidate), 1, 16) == ARGV[1] then
            token = candidate
            break
        end
    end
end

local outcome = 0
if token and redis.call('ZREM', KEYS[1], token) == 1 then
    redis.call('HDEL', KEYS[4], 'h:' .. token)
    outcome = 1
elseif token and ARGV[2] == 'token' and redis.call('ZREM', KEYS[2], token) == 1 then
    redis.call('ZREM', KEYS[3], token)
    redis.call('HDEL', KEYS[4], 'w:' .. token)
    outcome = 2
end

if outcome + dropped > 0 then  -- a slot (or a place ahead) is free: admit who is next
    semaphore_admit(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], now_ms)
end
local last = semaphore_keep(KEYS[1], KEYS[2], KEYS[3], KEYS[4], now_ms)
if not last then
    registry_remove(KEYS[5], KEYS[6], ARGV[3], now_ms)
else
    registry_set(KEYS[5], KEYS[6], ARGV[3], last, now_ms, true)
end
return outcome

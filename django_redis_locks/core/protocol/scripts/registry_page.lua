-- registry_page: one bucket's registry entries in name order, after forgetting expired ones.
--
-- KEYS[1]  <ns>:{b}:reg:names     registry: members in name order
-- KEYS[2]  <ns>:{b}:reg:expiry    registry: member -> expiry (ms)
-- ARGV[1]  lowest member, in ZRANGEBYLEX form ("[lock:prefix" or "(lock:after-this")
-- ARGV[2]  highest member, in ZRANGEBYLEX form ("[lock:prefix\xff")
-- ARGV[3]  most members to return
--
-- Reply:
--   {member, ...}  at most ARGV[3] members from ARGV[1] to ARGV[2], in byte order
-- @include registry
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
registry_prune(KEYS[1], KEYS[2], now_ms, 1000)
return redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))

-- hot_read: one bucket's contention figures, for the hot-locks listings. Writes nothing.
--
-- KEYS[1]  <ns>:{b}:hot   contention figures: member -> figures (lib/hot)
--
-- Reply:
--   {now_ms, member_1, figures_1, ..., member_n, figures_n}  every member the bucket keeps
--                                                            (hot_figures.py reads them)
local t = redis.call('TIME')
local reply = redis.call('HGETALL', KEYS[1])
table.insert(reply, 1, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
return reply

-- lib/hot: contention figures per name, for the "hot locks" listings (``-- @include hot``).
-- Written only where a name is contended (a try refused, a waiter queued or giving up, a
-- grant after a wait, a hold handed to a waiter): an uncontended acquire and release never
-- run hot_note.
--
-- hot_key  HASH  one per bucket (<ns>:{b}:hot): member ("lock:<name>" / "sem:<name>") ->
--                figures, at most HOT_NAMES members; the key expires HOT_KEEP_MS after its
--                last write. When it is full a new name takes the place of the least
--                contended one and inherits its score (as the space-saving count of the
--                most frequent items does), so that names contended by turns climb past the
--                others instead of evicting each other for ever.
--
-- A member's figures are numbers separated by spaces: for each window length (HOT_SHORT_MS,
-- then HOT_LONG_MS) the index of the current window (server time in ms // its length), the
-- nine figures of that window, then the nine of the window before it:
--   1 refused    tries refused (blocking=False)
--   2 queued     waiters that took a place in the queue
--   3 left       waiters that gave up their place (timed out, cancelled)
--   4 waits      grants after a wait; 5 their total wait (ms); 6 the longest (ms)
--   7 holds      holds released while waiters were queued (handed over, or kept by the
--                releasing session's slice); 8 their total length (ms); 9 the longest (ms)
-- and last (the 39th) the score the name inherited when it took its place (for ranking by
-- hot_score only: the figures are the name's own). (core/protocol/hot_figures.py reads them.)

local HOT_WINDOWS = {@HOT_SHORT_MS@, @HOT_LONG_MS@}
local HOT_NAMES = @HOT_NAMES@
local HOT_KEEP_MS = 2 * @HOT_LONG_MS@
-- Where each event counts among the nine figures of a window.
local HOT_EVENTS = {refused = 1, queued = 2, left = 3, waited = 4, held = 7}

-- ``numbers`` (a member's figures, parsed) brought to the windows of ``now_ms``: a window
-- that has ended becomes the one before, older ones are dropped.
local function hot_roll(numbers, now_ms)
    numbers[39] = numbers[39] or 0
    for w, length in ipairs(HOT_WINDOWS) do
        local base = (w - 1) * 19
        local index = math.floor(now_ms / length)
        local at = numbers[base + 1] or -2
        if w == #HOT_WINDOWS and at < index - 1 then
            numbers[39] = 0  -- (what it inherited is as old as its figures)
        end
        if at ~= index then
            for i = 1, 9 do
                if at == index - 1 then
                    numbers[base + 10 + i] = numbers[base + 1 + i]
                else
                    numbers[base + 10 + i] = 0
                end
                numbers[base + 1 + i] = 0
            end
            numbers[base + 1] = index
        end
    end
    return numbers
end

local function hot_parse(value, now_ms)
    local numbers = {}
    for n in string.gmatch(value or '', '%d+') do
        numbers[#numbers + 1] = tonumber(n)
    end
    return hot_roll(numbers, now_ms)
end

-- How contended a member was over the long window (its figures from numbers[20]): refused
-- tries and queued waiters, in this window and the one before, and the score it inherited.
local function hot_score(numbers)
    return numbers[21] + numbers[22] + numbers[30] + numbers[31] + numbers[39]
end

-- Count ``event`` (a key of HOT_EVENTS) for ``member``; ``ms``: how long the wait or hold
-- was ("waited" and "held" only).
local function hot_note(hot_key, member, now_ms, event, ms)
    if ms then
        ms = math.max(math.floor(ms), 0)  -- (a clock step back: no negative figures)
    end
    local value = redis.call('HGET', hot_key, member)
    local inherited = 0
    if not value and redis.call('HLEN', hot_key) >= HOT_NAMES then
        local all = redis.call('HGETALL', hot_key)
        local least, lowest = nil, nil
        for i = 1, #all, 2 do
            local score = hot_score(hot_parse(all[i + 1], now_ms))
            if not lowest or score < lowest then
                least, lowest = all[i], score
            end
        end
        redis.call('HDEL', hot_key, least)
        inherited = lowest
    end
    local numbers = hot_parse(value, now_ms)
    if not value then
        numbers[39] = inherited
    end
    local slot = HOT_EVENTS[event]
    for w = 1, #HOT_WINDOWS do
        local at = (w - 1) * 19 + 1 + slot
        numbers[at] = numbers[at] + 1
        if ms then
            numbers[at + 1] = numbers[at + 1] + ms
            numbers[at + 2] = math.max(numbers[at + 2], ms)
        end
    end
    local text = {}
    for i, n in ipairs(numbers) do
        text[i] = string.format('%.0f', n)
    end
    redis.call('HSET', hot_key, member, table.concat(text, ' '))
    redis.call('PEXPIRE', hot_key, HOT_KEEP_MS)
end

-- lib/estimate: how long a hold likely lasts still, the wait estimate a contended acquire
-- replies (``-- @include estimate``). A hint for Retry-After and retry countdowns only: no
-- promise rests on it.

-- How long a hold that has run ``held_ms`` likely has left, from the name's average hold
-- ``avg`` (ms; nil or false: no history yet): the rest of the average; past it, about one
-- more (at most 1 s, at least 1 ms); with no history, about as long again as it has run (at
-- least 1 s), so that callers that retry on it back off as the hold goes on.
local function estimate_left(avg, held_ms)
    if not avg then
        return math.max(held_ms, 1000)
    end
    local left = avg - held_ms
    if left > 0 then
        return left
    end
    return math.max(math.min(avg, 1000), 1)
end

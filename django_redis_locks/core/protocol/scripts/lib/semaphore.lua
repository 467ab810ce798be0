-- lib/semaphore: shared steps of the semaphore scripts (``-- @include semaphore``). Every
-- function takes its keys as arguments, and the including script passes KEYS entries.
--
-- holders_key  ZSET  token -> expiry (ms, server time) of each holder
-- queue_key    ZSET  token -> ticket of each blocked waiter: arrival order
-- leases_key   ZSET  token -> expiry (ms) of each waiter's place in the queue
-- info_key     HASH  limit, ticket (last ticket handed out), h:<token> -> holder record
--                    "<acquired_ms> <ticket> <metadata JSON>", w:<token> -> waiter record
--                    "<ttl_ms> <wake-up channel> <metadata JSON>" (what its grant will be,
--                    and its process's own channel for the news); gone: recent releases
--                    (see lib/gone) and avg: how long holds last (ms, a moving average), both
--                    kept RETENTION_MS (constants.py) after the last holder left; l: until
--                    when the name's registry entry is kept (lib/registry's registry_fit),
--                    which is when all four keys expire (semaphore_keep); q: "1" while the
--                    queue may exist (semaphore_waiting)
--
-- A holder counts while its expiry is in the future: expired holders and waiters are dropped
-- a bounded number per script, and counts never include them meanwhile.
--
-- Admission: a release (or an expiry) admits the first live waiters, each for a short
-- confirmation window only, and wakes them; each, woken (or at its next re-check), runs
-- sem_acquire with its token, which confirms its slot for the full TTL. Until then it stays in
-- the queue, in its place: if its window runs out unconfirmed, the next admission admits it
-- again, for as long as its place is leased. A waiter believes it holds a slot only from the
-- reply to its own confirmation, so what it believes never outlives what Redis keeps. A
-- waiter that died while queued keeps a slot no longer than the window at a time.
local SEMAPHORE_GRACE_MS = 1000
-- Most expired holders, and most dead waiters, dropped by one script: bounded work.
local SEMAPHORE_PRUNE = 32
-- How long the recent releases stay once nobody holds or waits (ms), and the admission window
-- (see the admission above), from constants.py.
local SEMAPHORE_RETENTION_MS = @RETENTION_MS@
local SEMAPHORE_WINDOW_MS = @HANDOVER_WINDOW_MS@

-- The registry member and start of wake-up messages of the semaphore whose holders are
-- ``holders_key``: "sem:<name>" (the name follows the key's hash tag and kind).
local function semaphore_member(holders_key)
    return 'sem:' .. string.match(holders_key, '}:sem:(.*)$')
end

-- The ticket of a holder record ("<acquired_ms> <ticket> <metadata JSON>", see above), as
-- text; nil for no record ('' or nil).
local function semaphore_record_ticket(record)
    return string.match(record or '', '^%d+ (%d+)')
end

-- How many holders one look reads (see semaphore_look) besides those it may drop.
local SEMAPHORE_LOOK = 8

-- One look at the holders (one ZRANGE for a semaphore with few): drop those whose TTL ran out
-- (at most SEMAPHORE_PRUNE, with their records). Returns
--   live   how many hold a slot now
--   last   the highest expiry left among the holders (ms; 0: none left, not even an expired
--          one; nil: more than one look reads, ask Redis)
--   gone   how many were dropped
--   mine   the expiry of ``token``'s live slot (nil: none; ``token`` nil: not asked)
--   rest   ``last`` without ``token``
-- A semaphore with more holders than one look reads asks Redis for the count and ``mine``.
local function semaphore_look(holders_key, info_key, now_ms, token)
    local size = SEMAPHORE_LOOK + SEMAPHORE_PRUNE
    local read = redis.call('ZRANGE', holders_key, 0, size - 1, 'WITHSCORES')
    local dropped, fields = {}, {}
    local live, last, mine, rest = 0, 0, nil, 0
    for i = 1, #read, 2 do
        local score = tonumber(read[i + 1])
        if score <= now_ms and #dropped < SEMAPHORE_PRUNE then
            dropped[#dropped + 1] = read[i]
            fields[#fields + 1] = 'h:' .. read[i]
        else
            last = score
            if score > now_ms then
                live = live + 1
            end
            if read[i] ~= token then
                rest = score
            elseif score > now_ms then
                mine = score
            end
        end
    end
    if #dropped > 0 then
        redis.call('ZREM', holders_key, unpack(dropped))
        redis.call('HDEL', info_key, unpack(fields))
    end
    if #read == 2 * size then  -- there may be more than the look read
        live = redis.call('ZCOUNT', holders_key, '(' .. now_ms, '+inf')
        last, rest = nil, nil
        if token then
            mine = tonumber(redis.call('ZSCORE', holders_key, token) or '0')
            if mine <= now_ms then
                mine = nil
            end
        end
    end
    return live, last, #dropped, mine, rest
end

-- Drop waiters whose lease ran out (at most SEMAPHORE_PRUNE); the caller calls this only
-- when the queue exists. Returns how many went.
local function semaphore_prune_waiters(queue_key, leases_key, info_key, now_ms)
    local left = redis.call('ZRANGEBYSCORE', leases_key, '-inf', now_ms,
        'LIMIT', 0, SEMAPHORE_PRUNE)
    for _, token in ipairs(left) do
        redis.call('ZREM', leases_key, token)
        redis.call('ZREM', queue_key, token)
        redis.call('HDEL', info_key, 'w:' .. token)
    end
    return #left
end

-- How long holds last (ms, a moving average, as text), with the hold that began at ``record``
-- ("<acquired_ms> ...", nil: unknown) ending now folded into ``avg`` (nil: none yet).
local function semaphore_average(record, avg, now_ms)
    local acquired = record and tonumber(string.match(record, '^(%d+)'))
    if not acquired then
        return avg
    end
    local lasted = now_ms - acquired
    if avg then
        lasted = math.floor((tonumber(avg) * 3 + lasted) / 4)
    end
    return string.format('%.0f', lasted)
end

-- How long until a slot is likely free: the soonest estimate (lib/estimate) among the first
-- few holders to expire, at most the first holder's TTL ``wait_ms`` (-1: nobody holds).
local function semaphore_estimate(holders_key, info_key, now_ms, wait_ms)
    if wait_ms < 0 then
        return wait_ms
    end
    local avg = redis.call('HGET', info_key, 'avg')
    avg = avg and tonumber(avg)
    local best = wait_ms
    local first = redis.call('ZRANGEBYSCORE', holders_key, '(' .. now_ms, '+inf', 'LIMIT', 0, 8)
    for _, token in ipairs(first) do
        local record = redis.call('HGET', info_key, 'h:' .. token) or ''
        local acquired = tonumber(string.match(record, '^(%d+)') or now_ms)
        local left = estimate_left(avg, now_ms - acquired)
        if left < best then
            best = left
        end
    end
    return best
end

-- How many hold a slot now.
local function semaphore_count(holders_key, now_ms)
    return redis.call('ZCOUNT', holders_key, '(' .. now_ms, '+inf')
end

-- A new ticket after the last one handed out (``last``, nil: none): larger than every earlier
-- one, also after the counter was lost (server time in microseconds), so tickets order
-- arrivals and never repeat. The caller stores it as the info hash's 'ticket'.
local function semaphore_ticket(last, now_us)
    local ticket = tonumber(last or '0') + 1
    if ticket < now_us then
        ticket = now_us
    end
    return string.format('%.0f', ticket)
end

-- Keep the semaphore's keys as long as its holders and waiters need them, and the info hash
-- RETENTION past that, for the recent releases a release then records. All four keys expire
-- together, at the info hash's l (``listed``, as read): until when the registry lists
-- ``member`` too (lib/registry's registry_fit). l moves only when it falls short of what the
-- keys need or lies more than REGISTRY_AHEAD_MS past it, so a name in steady use writes
-- neither the registry nor the info hash's expiry on most acquires and releases, and what a
-- holder or waiter that went away leaves (its record in the info hash) goes with the keys, or
-- with the next look at them (semaphore_look, semaphore_prune_waiters).
--
-- ``last``: the highest expiry among the holders (ms) if the caller knows it (0: the holders'
-- key is empty), nil to read it; ``waiting``: whether the queue exists. When nobody holds or
-- waits, what the info hash keeps is the recent releases and the average hold (``kept``:
-- {gone, avg}; nil: those of the info hash); otherwise ``kept`` is written to it. Its field
-- ``forget`` (nil: none) is dropped, and its q when nobody waits (``flagged``: q as read).
-- Returns the last expiry of a holder or waiter (ms), or nil when nobody holds or waits.
local function semaphore_keep(holders_key, queue_key, leases_key, info_key, names_key,
                              expiry_key, member, now_ms, waiting, listed, flagged, kept, forget,
                              last)
    if not last then
        local holder = redis.call('ZRANGE', holders_key, -1, -1, 'WITHSCORES')
        last = holder[2] and tonumber(holder[2]) or 0
    end
    local live = math.max(last, now_ms)
    if waiting then
        local lease = redis.call('ZRANGE', leases_key, -1, -1, 'WITHSCORES')
        if lease[2] and tonumber(lease[2]) > live then
            live = tonumber(lease[2])
        end
    end
    local nobody = live == now_ms and not waiting
    local fields, gone = {}, {}  -- the info hash's fields to write, and to drop
    if kept then
        fields = {'gone', kept[1] or '', 'avg', kept[2] or '0'}
    end
    if forget then
        gone[#gone + 1] = forget
    end
    local need = now_ms + SEMAPHORE_RETENTION_MS  -- nobody: the recent releases only
    if nobody then
        -- Made anew rather than cleared in place: a hash that held a record over 64 bytes
        -- keeps Redis's larger encoding until it is deleted.
        kept = kept or redis.call('HMGET', info_key, 'gone', 'avg')
        redis.call('DEL', holders_key, info_key)
        if not (kept[1] or kept[2]) then
            return nil
        end
        local until_ms = registry_fit(names_key, expiry_key, member, listed, need, now_ms)
            or listed
        redis.call('HSET', info_key, 'gone', kept[1] or '', 'avg', kept[2] or '0', 'l', until_ms)
        redis.call('PEXPIRE', info_key, tonumber(until_ms) - now_ms)
        return nil
    end
    need = live + SEMAPHORE_GRACE_MS + SEMAPHORE_RETENTION_MS
    if flagged and not waiting then
        gone[#gone + 1] = 'q'
    end
    local relisted = registry_fit(names_key, expiry_key, member, listed, need, now_ms)
    if relisted then
        fields[#fields + 1] = 'l'
        fields[#fields + 1] = relisted
    end
    if #gone > 0 then
        redis.call('HDEL', info_key, unpack(gone))
    end
    if #fields > 0 then
        redis.call('HSET', info_key, unpack(fields))
    end
    local keep = tonumber(relisted or listed) - now_ms  -- every key's, the info hash's l
    if relisted then
        redis.call('PEXPIRE', info_key, keep)
    end
    if last > 0 then  -- (made anew, maybe: an empty holders' key is no key)
        redis.call('PEXPIRE', holders_key, keep)
    end
    if waiting then
        redis.call('PEXPIRE', queue_key, keep)
        redis.call('PEXPIRE', leases_key, keep)
    end
    return live
end

-- Whether the queue exists, given the info hash's q as read (``flagged``): q is set when a
-- waiter takes a place and cleared by semaphore_keep once the queue is gone, so the
-- uncontended path never looks at the queue.
local function semaphore_waiting(queue_key, flagged)
    return flagged and redis.call('EXISTS', queue_key) == 1
end

-- Leave the queue; return true if ``token`` was in it.
local function semaphore_dequeue(queue_key, leases_key, info_key, token)
    if redis.call('ZREM', queue_key, token) == 1 then
        redis.call('ZREM', leases_key, token)
        redis.call('HDEL', info_key, 'w:' .. token)
        return true
    end
    return false
end

-- Admit as many live queued waiters, first come first served, as there are free slots: each
-- is made a holder for SEMAPHORE_WINDOW_MS (at most its TTL) and woken on its process's
-- channel ("<member>#<holder id>"); it stays in the queue until it confirms (see the admission
-- above), and one admitted already is passed over. Waiters whose lease ran out are dropped on
-- the way (at most SEMAPHORE_PRUNE). The caller calls this only when the queue exists.
-- Returns whether every live queued waiter now holds a slot (then a newcomer may take a free
-- slot), and whether anything was written.
local function semaphore_admit(holders_key, queue_key, leases_key, info_key, member, now_ms)
    local limit = tonumber(redis.call('HGET', info_key, 'limit') or '0')
    local free = limit - semaphore_count(holders_key, now_ms)
    local dead, index, wrote = 0, 0, false
    while dead < SEMAPHORE_PRUNE do
        local first = redis.call('ZRANGE', queue_key, index, index, 'WITHSCORES')
        if not first[1] then
            return true, wrote
        end
        local token = first[1]
        local lease = tonumber(redis.call('ZSCORE', leases_key, token) or '0')
        local record = redis.call('HGET', info_key, 'w:' .. token)
        local holds = tonumber(redis.call('ZSCORE', holders_key, token) or '0')
        if not record or lease <= now_ms then
            semaphore_dequeue(queue_key, leases_key, info_key, token)
            dead, wrote = dead + 1, true
        elseif holds > now_ms then  -- admitted already, its confirmation awaited
            index = index + 1
        elseif free <= 0 then
            return false, wrote
        else
            local ttl, channel, meta = string.match(record, '^(%d+) (%S+) (.*)$')
            if channel ~= '-' then
                redis.call('PUBLISH', channel,
                    member .. '#' .. string.sub(redis.sha1hex(token), 1, 16))
            end
            redis.call('ZADD', holders_key, now_ms + math.min(tonumber(ttl), SEMAPHORE_WINDOW_MS),
                token)
            redis.call('HSET', info_key, 'h:' .. token, string.format('%.0f', now_ms) .. ' '
                .. string.format('%.0f', tonumber(first[2])) .. ' ' .. meta)
            free, index, wrote = free - 1, index + 1, true
        end
    end
    return false, wrote
end

-- For listings (sem_inspect): the first ``most`` live waiters not yet admitted, looked for
-- among the first few places of the queue, each {holder id, ticket, lease ms, metadata}.
local function semaphore_waiters_listed(holders_key, queue_key, leases_key, info_key, now_ms,
                                        most)
    local listed = {}
    local queue = redis.call('ZRANGE', queue_key, 0, most * 2 + 16, 'WITHSCORES')
    for j = 1, #queue, 2 do
        if #listed >= most then
            break
        end
        local token = queue[j]
        local lease = tonumber(redis.call('ZSCORE', leases_key, token) or '0')
        local admitted = tonumber(redis.call('ZSCORE', holders_key, token) or '0') > now_ms
        local record = redis.call('HGET', info_key, 'w:' .. token)
        if lease > now_ms and not admitted and record then
            local meta = string.match(record, '^%d+ %S+ (.*)$')
            listed[#listed + 1] = {string.sub(redis.sha1hex(token), 1, 16),
                string.format('%.0f', tonumber(queue[j + 1])),
                string.format('%.0f', lease), meta or '{}'}
        end
    end
    return listed
end

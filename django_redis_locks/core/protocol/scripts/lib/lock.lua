-- lib/lock: shared steps of the lock scripts (``-- @include lock``). Every function takes its
-- keys as arguments, and the including script passes KEYS entries.
--
-- lock_key     HASH  token, fence, acquired, expires (ms, server time), m1, m2, ...: the
--                    holder's metadata JSON in pieces of at most LOCK_META_PIECE bytes, and mn:
--                    how many (see lock_grant); session,
--                    slice_end: whose slice is running and until when; reserved: until when a
--                    lock released during its holder's slice stays kept for that holder's
--                    session; told: the slice_end the first waiter was told about; xseq: the
--                    last extend applied to the current hold; gone: recent releases (see
--                    lib/gone); avg: how long holds last (ms, a moving average), for
--                    waiters' estimates; q: "1" while the queue may hold waiters (set by
--                    lock_enqueue, cleared by the first look that finds the queue empty), so
--                    that the uncontended path never looks at the queue; l: until when
--                    the name's registry entry is kept (lib/registry's registry_fit: at
--                    least as long as this hash). A release that leaves the lock free keeps
--                    only fence, gone, avg and l (and q, if set), for RETENTION_MS
--                    (constants.py; and what was left of the hold's TTL, up to
--                    LOCK_RELEASE_SLACK_MS): a released name costs little, its fence and recent
--                    releases outlive the hold, and its next hold needs no registry write.
--                    The release clears the hold's fields in place (lock_hold_fields): the
--                    hash keeps Redis's compact encoding throughout, since no value is longer
--                    than 64 bytes, so clearing it shrinks it.
-- queue_key    ZSET  token -> ticket of each blocked waiter: arrival order
-- waiters_key  HASH  token -> "<ttl ms> <session> <slice ms> <wake-up channel> <metadata JSON>"
--                    (lock_waiter reads it); the channel is the waiting process's own, so
--                    that a wake-up reaches that process only
-- leases_key   ZSET  token -> expiry (ms) of each waiter's place: a waiter that stops asking
--                    loses it, and dead places are dropped a bounded number at a time
--
-- A hold is live while its token is set and ``expires`` is in the future (server time).
--
-- Slices: the holder that got the lock may take it back, again and again, until its slice
-- (a few ms from that grant) ends, even while others wait; then its release hands the lock to
-- the first waiter. This keeps a lock busy under contention instead of paying a wake-up of
-- another process on every acquire, while no waiter waits more than a slice per holder ahead.
--
-- Hand-over: a release gives the lock to the first live waiter for a short confirmation
-- window only, and wakes it; the waiter, woken (or at its next re-check), runs lock_acquire
-- with its token, which confirms the hold for its full TTL. Until it does, it stays first in
-- the queue: if the window runs out unconfirmed (the waiter was slow), the next script that
-- finds the lock free hands it to that waiter again, for as long as its place is leased. A
-- waiter believes it holds the lock only from the reply to its own confirmation, so what it
-- believes never outlives what Redis keeps, whoever heard the wake-up. A waiter that died
-- while queued holds the lock no longer than the window at a time, and no longer than its
-- place's lease in all. An acquire that finds the lock free while an earlier waiter is due
-- hands it over the same way, so a free lock never waits for a waiter that may be dead.

-- Most dead waiters dropped, and most queue heads looked at, by one script: bounded work.
local LOCK_PRUNE = 16
-- How long what is left of a released name stays (ms), and the hand-over window (see the
-- hand-over above), from constants.py.
local LOCK_RETENTION_MS = @RETENTION_MS@
-- What is left of a released name may outlive LOCK_RETENTION_MS by what was left of the
-- hold's TTL, up to this (ms), so that a release need not set the hash's expiry.
local LOCK_RELEASE_SLACK_MS = 60000
local LOCK_WINDOW_MS = @HANDOVER_WINDOW_MS@

-- Holder metadata is stored in pieces of at most this many bytes: Redis keeps a hash whose
-- values are all at most 64 bytes long (hash-max-listpack-value) in its compact encoding, a
-- third of the size of the other, and one longer value would switch it for good.
local LOCK_META_PIECE = 64

-- The registry member and start of wake-up messages of the lock ``lock_key``: "lock:<name>"
-- (the name follows the key's hash tag and kind; a namespace has no braces).
local function lock_member(lock_key)
    return 'lock:' .. string.match(lock_key, '}:lock:(.*)$')
end

-- The fields of a waiter record (see waiters_key): ttl (ms, a number), session, slice (ms, a
-- number), wake-up channel, metadata JSON.
local function lock_waiter(record)
    local ttl, session, slice, channel, meta = string.match(record, '^(%d+) (%S+) (%d+) (%S+) (.*)$')
    return tonumber(ttl), session, tonumber(slice), channel, meta
end

-- Leave the queue; return true if ``token`` was in it.
local function lock_dequeue(queue_key, waiters_key, leases_key, token)
    if redis.call('ZREM', queue_key, token) == 1 then
        redis.call('HDEL', waiters_key, token)
        redis.call('ZREM', leases_key, token)
        return true
    end
    return false
end

-- The first waiter whose place is still leased, with its record, and whether the queue may
-- still hold waiters (the new value of the lock hash's q). ``waiting`` is q as read: unset,
-- nobody waits and the queue is not looked at (the usual case: no command). Drops waiters
-- whose lease ran out on the way, at most LOCK_PRUNE of them: past that it answers nil (as if
-- nobody waited), and later scripts drop more. A queue found empty clears q.
local function lock_queue_head(lock_key, queue_key, waiters_key, leases_key, now_ms, waiting)
    if not waiting then
        return nil, nil, false
    end
    local dead = redis.call('ZRANGEBYSCORE', leases_key, '-inf', now_ms, 'LIMIT', 0, LOCK_PRUNE)
    for _, token in ipairs(dead) do
        lock_dequeue(queue_key, waiters_key, leases_key, token)
    end
    for _ = 1, LOCK_PRUNE do
        local head = redis.call('ZRANGE', queue_key, 0, 0)[1]
        if not head then
            redis.call('HDEL', lock_key, 'q')
            return nil, nil, false
        end
        local lease = redis.call('ZSCORE', leases_key, head)
        local record = redis.call('HGET', waiters_key, head)
        if lease and record and tonumber(lease) > now_ms then
            return head, record, true
        end
        lock_dequeue(queue_key, waiters_key, leases_key, head)
    end
    return nil, nil, true
end

-- Take (or keep) a place in the queue, renew its lease; return the 1-based position, and
-- whether the place is new.
-- ``waiting`` is the lock hash's q as the script last knew it: set here if it is not.
local function lock_enqueue(lock_key, queue_key, waiters_key, leases_key, token, now_ms, now_us,
                            lease_ms, record, waiting)
    if not waiting then
        redis.call('HSET', lock_key, 'q', '1')
    end
    local new = redis.call('ZADD', queue_key, 'NX', now_us, token) == 1
    if new then
        redis.call('HSET', waiters_key, token, record)
    end
    redis.call('ZADD', leases_key, now_ms + lease_ms, token)
    redis.call('PEXPIRE', queue_key, lease_ms * 2)
    redis.call('PEXPIRE', waiters_key, lease_ms * 2)
    redis.call('PEXPIRE', leases_key, lease_ms * 2)
    return redis.call('ZRANK', queue_key, token) + 1, new
end

-- The next fence: max(last + 1, server time in microseconds), so fences keep increasing even
-- when the stored one (``last``, or nil) was lost.
local function lock_next_fence(last, now_us)
    local fence = tonumber(last or '0') + 1
    if fence < now_us then
        fence = now_us
    end
    return string.format('%.0f', fence)
end

-- Keep the registry entry of ``member`` as long as the lock hash that is about to expire in
-- ``life_ms`` (its TTL and the retention), and a little longer (registry_fit); ``listed`` is
-- the hash's l as read. Returns the new l to write (text), or nil (the entry fits: no command).
local function lock_listing(names_key, expiry_key, member, listed, life_ms, now_ms)
    return registry_fit(names_key, expiry_key, member, listed, now_ms + life_ms + LOCK_RETENTION_MS,
        now_ms)
end

-- The fields of a hold, which a release clears: ``pieces`` is the hash's mn as read (nil:
-- none). ('meta' held the metadata in one piece before it was split.)
local function lock_hold_fields(pieces)
    local fields = {'token', 'acquired', 'expires', 'session', 'slice_end', 'reserved', 'told',
        'xseq', 'mn', 'meta'}
    for i = 1, tonumber(pieces or '0') do
        fields[#fields + 1] = 'm' .. i
    end
    return fields
end

-- The holder's metadata JSON of the hash ``lock_key``, whose mn was read as ``pieces`` (a
-- hash written before the metadata was split keeps it whole, in ``meta``).
local function lock_metadata(lock_key, pieces, meta)
    local count = tonumber(pieces or '0')
    if count == 0 then
        return meta or '{}'
    end
    local names = {}
    for i = 1, count do
        names[i] = 'm' .. i
    end
    return table.concat(redis.call('HMGET', lock_key, unpack(names)))
end

-- Make ``token`` the holder for ``ttl_ms`` with ``fence``, in the slice of ``session`` that
-- ends at ``slice_end``. ``hash``: what the caller read of the hash: l (the new one, see
-- lock_listing) and mn (how many pieces the metadata before this grant had, to drop those
-- the new one does not overwrite).
local function lock_grant(lock_key, token, ttl_ms, meta, now_ms, fence, session, slice_end, hash)
    local fields = {'token', token, 'fence', fence, 'acquired', string.format('%.0f', now_ms),
        'expires', string.format('%.0f', now_ms + ttl_ms), 'session', session,
        'slice_end', string.format('%.0f', slice_end), 'reserved', '0', 'xseq', '0',
        'l', hash.l}
    local pieces = 0
    for at = 1, #meta, LOCK_META_PIECE do
        pieces = pieces + 1
        fields[#fields + 1] = 'm' .. pieces
        fields[#fields + 1] = string.sub(meta, at, at + LOCK_META_PIECE - 1)
    end
    fields[#fields + 1] = 'mn'
    fields[#fields + 1] = tostring(pieces)
    redis.call('HSET', lock_key, unpack(fields))
    local before = tonumber(hash.mn or '0')
    if before > pieces then  -- (a longer metadata's hold expired unreleased)
        local stale = {}
        for i = pieces + 1, before do
            stale[#stale + 1] = 'm' .. i
        end
        redis.call('HDEL', lock_key, unpack(stale))
    end
    redis.call('PEXPIRE', lock_key, ttl_ms + LOCK_RETENTION_MS)
end

-- Hand the lock to the queued waiter ``head`` (its ``record`` from lock_queue_head) for the
-- confirmation window (at most its TTL) with a new fence, and wake it on its own channel
-- ("<member>#<holder id>"). The waiter stays first in the queue until it confirms (see the
-- hand-over above). ``hash``: what the caller read of the hash: fence (the stored one), l and
-- mn. Returns how long the lock is kept for it (ms).
local function lock_hand_over(lock_key, names_key, expiry_key, member, head, record, now_ms,
                              now_us, hash)
    local ttl, session, slice, channel, meta = lock_waiter(record)
    local kept = math.min(ttl, LOCK_WINDOW_MS)
    redis.call('PUBLISH', channel, member .. '#' .. string.sub(redis.sha1hex(head), 1, 16))
    local listed = lock_listing(names_key, expiry_key, member, hash.l, kept, now_ms) or hash.l
    lock_grant(lock_key, head, kept, meta, now_ms, lock_next_fence(hash.fence, now_us), session,
        now_ms + slice, {l = listed, mn = hash.mn})
    return kept
end

-- For listings (lock_inspect): how many of the lock's queued waiters are live (their place
-- leased; ``holder``, a waiter handed the lock, holds it and is left out), then the first
-- ``most`` of them, looked for among the first few places of the queue (dead ones are dropped
-- lazily), each {holder id, queued ms, lease ms, metadata}.
local function lock_waiters_listed(queue_key, waiters_key, leases_key, holder, now_ms, most)
    local count = redis.call('ZCOUNT', leases_key, '(' .. now_ms, '+inf')
    local own = tonumber(redis.call('ZSCORE', leases_key, holder) or '0')
    if own > now_ms then  -- handed the lock, not yet confirmed: it holds
        count = count - 1
    end
    local listed = {count}
    local queue = redis.call('ZRANGE', queue_key, 0, most * 2 + 16, 'WITHSCORES')
    for j = 1, #queue, 2 do
        local token = queue[j]
        local lease = tonumber(redis.call('ZSCORE', leases_key, token) or '0')
        local record = redis.call('HGET', waiters_key, token)
        if #listed > most then
            break
        end
        if token ~= holder and lease > now_ms and record then
            local _, _, _, _, meta = lock_waiter(record)
            listed[#listed + 1] = {string.sub(redis.sha1hex(token), 1, 16),
                string.format('%.0f', math.floor(tonumber(queue[j + 1]) / 1000)),
                string.format('%.0f', lease), meta or '{}'}
        end
    end
    return listed
end

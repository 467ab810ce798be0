-- lib/gone: the recent releases of a lock or semaphore (``-- @include gone``), so that a
-- release or forced release that arrives twice (a client resends a command after a cut
-- connection) takes effect once, and the second run reports what happened.
--
-- Kept in the field 'gone' of the primitive's hash (the lock hash, the semaphore info hash):
-- entries separated by spaces, newest first, at most GONE_KEEP of them: "R<holder id>", its
-- holder released it; "X<holder id>.<request id>", it was force-released by that request
-- (so that the request, resent, is told it succeeded, and another one that it came too
-- late). Holder ids are lowercase hex, so a kind letter is never part of one.
local GONE_KEEP = 16

-- Record that the hold ``hid`` ended: ``entry`` is "R<hid>" or "X<hid>.<request id>".
local function gone_add(hash_key, hid, entry)
    local entries = {entry}
    for old in string.gmatch(redis.call('HGET', hash_key, 'gone') or '', '%S+') do
        if #entries >= GONE_KEEP then
            break
        end
        if string.sub(old, 2, 17) ~= hid then
            entries[#entries + 1] = old
        end
    end
    redis.call('HSET', hash_key, 'gone', table.concat(entries, ' '))
end

-- How the hold ``hid`` ended, if it is among the recent ones: "R", "X" or nil, and for "X"
-- the request id of the forced release.
local function gone_kind(hash_key, hid)
    local list = redis.call('HGET', hash_key, 'gone')
    if not list then
        return nil, nil
    end
    local at = string.find(list, hid, 1, true)
    if not at or at < 2 then
        return nil, nil
    end
    return string.sub(list, at - 1, at - 1), string.match(list, '^%.(%S+)', at + 16)
end

-- lib/gone: the recent releases of a lock or semaphore (``-- @include gone``), so that a
-- release or forced release that arrives twice (a client resends a command after a cut
-- connection) takes effect once, and the second run reports what happened.
--
-- Kept in the field 'gone' of the primitive's hash (the lock hash, the semaphore info hash):
-- entries separated by spaces, newest first, at most GONE_KEEP of them: "R<holder id>", its
-- holder released it; "X<holder id>.<request id>", it was force-released by that request
-- (so that the request, resent, is told it succeeded, and another one that it came too
-- late). Holder ids are lowercase hex, so a kind letter is never part of one.
local GONE_KEEP = @RECENT_RELEASES@

-- The recent releases with "R<hid>"/"X<hid>.<request id>" (``entry``) in front: ``list`` is the
-- field's current value (nil: none); the caller writes the result to the field. An older entry
-- of the same hold is dropped; past GONE_KEEP entries, the oldest go.
local function gone_with(list, hid, entry)
    if not list or list == '' then
        return entry
    end
    if string.find(list, hid, 1, true) then  -- (rare: the hold ended twice) rebuild the list
        local entries = {entry}
        for old in string.gmatch(list, '%S+') do
            if #entries >= GONE_KEEP then
                break
            end
            if string.sub(old, 2, 17) ~= hid then
                entries[#entries + 1] = old
            end
        end
        return table.concat(entries, ' ')
    end
    -- (usual: no entry of this hold) keep the first GONE_KEEP - 1 entries as they are
    local cut = 0
    for _ = 1, GONE_KEEP - 1 do
        cut = string.find(list, ' ', cut + 1, true)
        if not cut then
            return entry .. ' ' .. list
        end
    end
    return entry .. ' ' .. string.sub(list, 1, cut - 1)
end

-- How the hold ``hid`` ended, if it is among the recent ones ``list`` (the field's value,
-- nil: none): "R", "X" or nil, and for "X" the request id of the forced release.
local function gone_in(list, hid)
    if not list then
        return nil, nil
    end
    local at = string.find(list, hid, 1, true)
    if not at or at < 2 then
        return nil, nil
    end
    return string.sub(list, at - 1, at - 1), string.match(list, '^%.(%S+)', at + 16)
end

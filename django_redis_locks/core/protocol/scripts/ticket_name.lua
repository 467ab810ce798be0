-- ticket_name: add the enqueued task's id to a unique task's ticket record (tickets.py), if
-- the record is still the one this enqueue wrote: meanwhile a worker may have taken the hold
-- over (and deleted the record), and a newer enqueue written its own, which must stay.
--
-- KEYS[1]  <ns>:{b}:ticket:<name>  the ticket record
-- ARGV[1]  the record as this enqueue wrote it ("- <ticket>")
-- ARGV[2]  the record with the task's id ("<task id> <ticket>")
--
-- Reply:
--   1  named (the record's expiry kept)
--   0  the record is gone or another's: nothing written
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return 1

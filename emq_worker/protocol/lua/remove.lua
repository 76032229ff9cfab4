-- remove: delete a job that nobody holds, from whichever set it is in.
--
-- KEYS[1] = emq:{q}:pending
-- KEYS[2] = emq:{q}:active
-- KEYS[3] = emq:{q}:schedule
-- KEYS[4] = emq:{q}:dead
-- KEYS[5] = emq:{q}:suspects (the removed job's id is SREMed)
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = job id
-- ARGV[3] = dedup id, or "" for the row's own `dedup` field (its de:<did> key is deleted only
--           while it still names this job)
-- ARGV[4] = "dead" to remove the job only while it is in dead (purging the morgue), "pending" only
--           while it is in pending (emptying a queue), or ""
--
-- Reply: 1 removed, -1 gone (no row). Removes the row and its logs and receipt subkeys.
-- Errors: EMQLOCK when the lock subkey or the row's lock field exists (a worker holds the job);
--         EMQSTATE when ARGV[4] names a set the job is not in (nothing changed).
local p, id, did = ARGV[1], ARGV[2], ARGV[3]
local row = p .. 'job:' .. id
if redis.call('EXISTS', row) == 0 then
  return -1
end
if redis.call('EXISTS', row .. ':lock') == 1 or redis.call('HEXISTS', row, 'lock') == 1 then
  return redis.error_reply('EMQLOCK job is locked: ' .. id)
end
local only = ({pending = KEYS[1], dead = KEYS[4]})[ARGV[4]]
if only and not redis.call('ZSCORE', only, id) then
  return redis.error_reply('EMQSTATE not ' .. ARGV[4] .. ': ' .. id)
end
for i = 1, 4 do
  redis.call('ZREM', KEYS[i], id)
end
if did == '' then
  did = redis.call('HGET', row, 'dedup') or ''
end
if did ~= '' and redis.call('GET', p .. 'de:' .. did) == id then
  redis.call('DEL', p .. 'de:' .. did)
end
redis.call('SREM', KEYS[5], id)
redis.call('DEL', row, row .. ':logs', row .. ':receipt')
return 1

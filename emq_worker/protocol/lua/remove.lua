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
-- ARGV[4] = "dead" to remove the job only while it is in dead (purging the morgue), or ""
--
-- Reply: 1 removed (the row and its lock, logs and receipt subkeys); 0 the row was gone but
--        the id was still a member of a set (EchoMQ's late complete of a job we dead-lettered
--        deletes only the row): those members and subkeys are removed; -1 gone (nothing at all).
-- Errors: EMQLOCK when a lock still holds the job (includes/holds.lua: a live :lock subkey, or
--         the row's `lock` field while it can be live); EMQSTATE when ARGV[4] is "dead" and the
--         job is not in dead (nothing changed in either case).
--- @include holds
local p, id, did = ARGV[1], ARGV[2], ARGV[3]
local row = p .. 'job:' .. id
if redis.call('EXISTS', row) == 0 then
  local members = 0
  for i = 1, 4 do
    members = members + redis.call('ZREM', KEYS[i], id)
  end
  redis.call('SREM', KEYS[5], id)
  if members == 0 then
    return -1
  end
  redis.call('DEL', row .. ':lock', row .. ':logs', row .. ':receipt')
  return 0
end
if lock_hold(row, redis.call('HGET', row, 'state')) then
  return redis.error_reply('EMQLOCK job is locked: ' .. id)
end
if ARGV[4] == 'dead' and not redis.call('ZSCORE', KEYS[4], id) then
  return redis.error_reply('EMQSTATE not dead: ' .. id)
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
redis.call('DEL', row, row .. ':lock', row .. ':logs', row .. ':receipt')
return 1

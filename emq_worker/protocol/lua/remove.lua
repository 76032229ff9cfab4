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
-- Reply: 1 removed; 0 forgotten: no row, but the job completed within the window, and its
--        completion tombstones are deleted: p.."idem:"..id, and de:<did> when ARGV[3] names a
--        key that names this job, so that id and dedup id may be enqueued again (never with
--        ARGV[4] "dead"); -1 gone (neither row nor tombstone). Removes the row, its logs and
--        receipt subkeys, and its idem:<id> key.
-- Errors: EMQLOCK when the lock subkey or the row's lock field exists (a worker holds the job);
--         EMQSTATE when ARGV[4] is "dead" and the job is not in dead (nothing changed).
local p, id, did = ARGV[1], ARGV[2], ARGV[3]
local row, idem = p .. 'job:' .. id, p .. 'idem:' .. id
if redis.call('EXISTS', row) == 0 then
  if ARGV[4] == 'dead' then
    return -1
  end
  local forgot = redis.call('GET', idem) == 'completed'
  redis.call('DEL', idem) -- a "live" one left by a row deleted elsewhere goes too
  if did ~= '' and redis.call('GET', p .. 'de:' .. did) == id then
    forgot = redis.call('DEL', p .. 'de:' .. did) == 1
  end
  return forgot and 0 or -1
end
if redis.call('EXISTS', row .. ':lock') == 1 or redis.call('HEXISTS', row, 'lock') == 1 then
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
redis.call('DEL', row, row .. ':logs', row .. ':receipt', idem)
return 1

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
-- Reply: 1 removed (the row, its lock and logs subkeys, its receipt, a flow parent's subkeys
--        (includes/flows.lua), and its idem:<id> key);
--        0 the row was gone, but either the id was still a member of a set (EchoMQ's late complete
--        of a job we dead-lettered deletes only the row: those members and subkeys are removed),
--        or the job completed within the window and its completion tombstones are deleted:
--        p.."idem:"..id, and de:<did> when ARGV[3] names a key that names this job, so that id
--        and dedup id may be enqueued again (only with ARGV[4] ""); -1 gone (nothing at all).
-- Errors: EMQLOCK when a lock still holds the job (includes/holds.lua: a live :lock subkey, or
--         the row's `lock` field while it can be live); EMQSTATE when ARGV[4] names a set the
--         job is not in (nothing changed in either case).
-- A grouped job (its row's `group`) waits in its group's lane, not pending: it leaves the lane
-- (which leaves the ring once empty), "pending" means that lane for it, and an unheld job of
-- it removed from active is counted out of gactive (EchoMQ's remove_job leaves the count up, so
-- a lane at its limit would never be served again).
--- @include holds
--- @include flows
--- @include lanes
--- @include receipts
local p, id, did = ARGV[1], ARGV[2], ARGV[3]
local row, idem = p .. 'job:' .. id, p .. 'idem:' .. id
if redis.call('EXISTS', row) == 0 then
  local members = 0
  for i = 1, 4 do
    members = members + redis.call('ZREM', KEYS[i], id)
  end
  redis.call('SREM', KEYS[5], id)
  if members > 0 then
    redis.call('DEL', row .. ':lock', row .. ':logs')
    redis.call('HDEL', receipts_key(p, id), receipt_field(id))
  end
  local forgot = false
  if ARGV[4] == '' then
    forgot = redis.call('GET', idem) == 'completed'
    redis.call('DEL', idem) -- a "live" one left by a row deleted elsewhere goes too
    if did ~= '' and redis.call('GET', p .. 'de:' .. did) == id then
      forgot = redis.call('DEL', p .. 'de:' .. did) == 1 or forgot
    end
  end
  if members > 0 or forgot then
    return 0
  end
  return -1
end
if lock_hold(row, redis.call('HGET', row, 'state')) then
  return redis.error_reply('EMQLOCK job is locked: ' .. id)
end
local group = redis.call('HGET', row, 'group')
local only = ({pending = group and lane_key(p, group) or KEYS[1], dead = KEYS[4]})[ARGV[4]]
if only and not redis.call('ZSCORE', only, id) then
  return redis.error_reply('EMQSTATE not ' .. ARGV[4] .. ': ' .. id)
end
for i = 1, 4 do
  local left = redis.call('ZREM', KEYS[i], id)
  if group and i == 2 and left == 1 then
    lane_left(p, group)
  end
end
if group and redis.call('ZREM', lane_key(p, group), id) == 1 then
  lane_tidy(p, group)
end
if did == '' then
  did = redis.call('HGET', row, 'dedup') or ''
end
if did ~= '' and redis.call('GET', p .. 'de:' .. did) == id then
  redis.call('DEL', p .. 'de:' .. did)
end
redis.call('SREM', KEYS[5], id)
redis.call('DEL', row, row .. ':lock', row .. ':logs', idem)
redis.call('HDEL', receipts_key(p, id), receipt_field(id))
flow_retire(p, id)
return 1

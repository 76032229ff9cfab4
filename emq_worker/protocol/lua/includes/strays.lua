-- in_state(p, key, ids, state): the ids of `ids` (members of the sorted set `key`) whose row is
-- in `state`, or has no state (no row: a phantom, which the caller counts). The others are stray
-- members: the row's state names another set, because a client without our checks put the id
-- back (EchoMQ's renew-many re-adds a reaped or dead-lettered job to active, D1; its delay after
-- a reap leaves the job in pending too, D8). A stray is ZREMed from `key` here and not counted:
-- the job already is where its row says, and moving it again would run it twice, dead-letter it
-- twice or count a reap that never happened.
local function in_state(p, key, ids, state)
  local kept = {}
  for _, id in ipairs(ids) do
    local found = redis.call('HGET', p .. 'job:' .. id, 'state')
    if found and found ~= state then
      redis.call('ZREM', key, id)
    else
      kept[#kept + 1] = id
    end
  end
  return kept
end

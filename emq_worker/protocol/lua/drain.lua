-- drain: delete the jobs waiting in pending (and, when asked, in schedule), as EchoMQ's drain
-- does, with every key of ours named after them; active jobs are left to run.
--
-- KEYS[1] = emq:{q}:pending
-- KEYS[2] = emq:{q}:schedule
-- KEYS[3] = emq:{q}:suspects (each drained id is SREMed)
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = "1" to drain schedule too (after pending), "" for pending only
-- ARGV[3] = batch: the most members to take in this call (the caller calls again while more)
--
-- Reply: {drained, more}: drained = the jobs deleted; more = 1 when the batch was used up.
-- A member whose row is in another state (a stray: includes/strays.lua, e.g. a job EchoMQ's
-- delay left in pending that a worker has since claimed) is only ZREMed: the job is not deleted.
--- @include strays
--- @include forget
local p, batch = ARGV[1], tonumber(ARGV[3])
local sets = {{KEYS[1], 'pending'}}
if ARGV[2] == '1' then
  sets[2] = {KEYS[2], 'scheduled'}
end
local drained, taken = 0, 0
for _, set in ipairs(sets) do
  local ids = redis.call('ZRANGE', set[1], 0, batch - taken - 1)
  taken = taken + #ids
  for _, id in ipairs(in_state(p, set[1], ids, set[2])) do
    forget(p, id, p .. 'job:' .. id)
    redis.call('ZREM', set[1], id)
    redis.call('SREM', KEYS[3], id)
    drained = drained + 1
  end
  if taken >= batch then
    return {drained, 1}
  end
end
return {drained, 0}

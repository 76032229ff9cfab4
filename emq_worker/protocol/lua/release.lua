-- release: hand leases back to pending at once (graceful shutdown), fenced per job.
--
-- KEYS[1] = emq:{q}:active
-- KEYS[2] = emq:{q}:pending
-- KEYS[3] = emq:{q}:wake
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2..] = one triple per lease: id, token, nonce
--
-- Reply: the number of jobs handed back. A lease that is no longer this holder's, or a job that
-- is no longer active, is skipped: a release never moves a job someone else holds.
-- attempts is kept (it only ever climbs); the next claim increments it. A hand-back spent no
-- attempt of the retry budget: attempts_base rises by one with it, so the budget
-- (attempts - attempts_base) counts only attempts that ended in a settle or a reap.
-- A grouped job goes back to its group's lane (includes/lanes.lua), a job with a priority at its
-- priority.
--- @include fence
--- @include lanes
local p = ARGV[1]
local released = 0
for i = 2, #ARGV, 3 do
  local id = ARGV[i]
  local row, state, verdict, _, group = fence(p, id, ARGV[i + 1], ARGV[i + 2])
  if not verdict and state == 'active' and redis.call('ZREM', KEYS[1], id) == 1 then
    make_ready(p, KEYS[2], id, group, redis.call('HGET', row, 'priority'), true)
    redis.call('HSET', row, 'state', 'pending')
    redis.call('HINCRBY', row, 'attempts_base', 1)
    redis.call('DEL', row .. ':lock')
    released = released + 1
  end
end
wake(KEYS[3], released)
return released

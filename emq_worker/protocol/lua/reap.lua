-- reap: return expired leases to pending on the server clock, or dead-letter a crash loop.
--
-- KEYS[1] = emq:{q}:active
-- KEYS[2] = emq:{q}:pending
-- KEYS[3] = emq:{q}:dead
-- KEYS[4] = emq:{q}:metrics:failed
-- KEYS[5] = emq:{q}:wake
-- KEYS[6] = emq:{q}:suspects (SET): a job returned to pending is SADDed (claim keeps suspects apart,
--           one per worker) when this is its second reap (the row's `reaps` counts them), or
--           when its next attempt is its last: its holders died or froze running it twice, maybe
--           because of it, or one more death beside another suspect would dead-letter it. A job
--           dead-lettered or found gone is SREMed. (A single death, a crash, a freeze or a
--           partition, makes no suspect. Every job returned gets `reaped_at`, the server time of
--           the reap: claim lets a suspect share a worker once it has waited half a lease.)
--           Each SADD sets the set's PX to a day.
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = batch: the most leases to reap in this call (ZRANGEBYSCORE ... LIMIT 0 batch)
-- ARGV[3] = max_attempts: a lease that expires at attempts - attempts_base >= max_attempts goes
--           to dead with last_error "lease expired ..." instead of cycling forever (EchoMQ's D2)
--
-- A member whose row is not active (EchoMQ's renew put it back: D1) is only ZREMed: not counted,
-- not moved, not listed. A job returned goes to pending at its priority (the row's `priority`;
-- 0 when absent); a grouped one goes back to its group's lane, and gactive counts it out whether
-- it is returned or dead-lettered (includes/lanes.lua), so its lane joins the ring again.
-- Reply: {returned, dead_lettered, phantoms, more, id1, outcome1, id2, outcome2, ...}; more = 1
--        when the batch was full and another call may find more; outcome is 'pending' or 'dead'
--        for each job reaped (phantoms are not listed). Each reaped job loses its lock subkey;
--        returned jobs push wake tokens.
-- A flow child dead-lettered here tells its parent, as a settle's dead outcome does
-- (includes/flows.lua); a parent that thereby goes to pending adds a wake token.
-- Events: 'reaped' per job reaped (outcome pending or dead; error for dead), only while someone
-- subscribes to p.."events".
--- @include now_ms
--- @include fence
--- @include events
--- @include strays
--- @include flows
--- @include lanes
-- Our scripts remove a suspect whenever its job leaves; a member another client's settle or
-- obliterate left behind goes with the set a day after the last suspect was added.
local SUSPECTS_TTL_MS = 86400000
local p, batch, max = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
local found = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, batch)
local expired = in_state(p, KEYS[1], found, 'active') -- strays are dropped, uncounted
local listeners = #expired > 0 and listening(p)
local returned, dead, phantoms, released, rung = 0, 0, 0, 0, 0
local reaped = {}
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  local row = p .. 'job:' .. id
  local fields = redis.call('HMGET', row, 'attempts', 'attempts_base', 'group', 'priority')
  if not fields[1] then
    phantoms = phantoms + 1
    redis.call('SREM', KEYS[6], id)
  elseif tonumber(fields[1]) - tonumber(fields[2] or '0') >= max then
    local reason = 'lease expired on attempt ' .. fields[1] .. ' (max_attempts ' .. max .. ')'
    redis.call('ZADD', KEYS[3], 0, id)
    redis.call('HSET', row, 'state', 'dead', 'last_error', reason)
    redis.call('HINCRBY', KEYS[4], 'count', 1)
    redis.call('SREM', KEYS[6], id)
    if fields[3] then
      rung = rung + lane_left(p, fields[3])
    end
    dead = dead + 1
    released = released + flow_failed(p, row, id, reason)
    if listeners then
      emit(p, 'reaped', id, fields[1], now, {outcome = 'dead', error = reason})
    end
    reaped[#reaped + 1] = id
    reaped[#reaped + 1] = 'dead'
  else
    make_ready(p, KEYS[2], id, fields[3], fields[4], true)
    redis.call('HSET', row, 'state', 'pending', 'reaped_at', now)
    local reaps = redis.call('HINCRBY', row, 'reaps', 1)
    if reaps >= 2 or tonumber(fields[1]) - tonumber(fields[2] or '0') + 1 >= max then
      redis.call('SADD', KEYS[6], id)
      redis.call('PEXPIRE', KEYS[6], SUSPECTS_TTL_MS)
    end
    returned = returned + 1
    if listeners then
      emit(p, 'reaped', id, fields[1], now, {outcome = 'pending'})
    end
    reaped[#reaped + 1] = id
    reaped[#reaped + 1] = 'pending'
  end
  redis.call('DEL', row .. ':lock')
end
wake(KEYS[5], returned + released + rung)
local more = 0
if #found == batch then
  more = 1
end
local reply = {returned, dead, phantoms, more}
for i = 1, #reaped do
  reply[4 + i] = reaped[i]
end
return reply

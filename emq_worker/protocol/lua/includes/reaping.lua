-- reap_due(p, keys, batch, max, now): return up to `batch` leases whose deadline has passed
-- (server ms `now`) to pending, or dead-letter a crash loop; what lua/reap.lua's header says, for
-- reap.lua and upkeep.lua alike. `keys` = {active, pending, dead, failed, wake, suspects}.
-- Returns returned, dead_lettered, phantoms, more (true when the batch was full), and the flat
-- list {id1, outcome1, ...} of the jobs reaped. A job returned goes to pending at its priority, a
-- grouped one to its lane (includes/lanes.lua); a flow child dead-lettered tells its parent
-- (includes/flows.lua), and a parent released so adds a wake token.
--- @include attempts
--- @include fence
--- @include events
--- @include strays
--- @include flows
--- @include lanes
-- Our scripts remove a suspect whenever its job leaves; a member another client's settle or
-- obliterate left behind goes with the set a day after the last suspect was added.
local SUSPECTS_TTL_MS = 86400000
local function reap_due(p, keys, batch, max, now)
  local found = redis.call('ZRANGEBYSCORE', keys.active, '-inf', now, 'LIMIT', 0, batch)
  local expired = in_state(p, keys.active, found, 'active') -- strays are dropped, uncounted
  local listeners = #expired > 0 and listening(p)
  local returned, dead, phantoms, released, rung = 0, 0, 0, 0, 0
  local reaped = {}
  for _, id in ipairs(expired) do
    redis.call('ZREM', keys.active, id)
    local row = p .. 'job:' .. id
    local fields = redis.call('HMGET', row, 'attempts', 'attempts_base', 'group', 'priority')
    if not fields[1] then
      phantoms = phantoms + 1
      redis.call('SREM', keys.suspects, id)
    elseif tonumber(fields[1]) - tonumber(fields[2] or '0') >= max then
      local reason = 'lease expired on attempt ' .. fields[1] .. ' (max_attempts ' .. max .. ')'
      redis.call('ZADD', keys.dead, 0, id)
      redis.call('HSET', row, 'state', 'dead', 'last_error', reason)
      fence_out_holder(row) -- its lapsed holder may still complete it late (EchoMQ's D8)
      redis.call('HINCRBY', keys.failed, 'count', 1)
      redis.call('SREM', keys.suspects, id)
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
      make_ready(p, keys.pending, id, fields[3], fields[4], true)
      redis.call('HSET', row, 'state', 'pending', 'reaped_at', now)
      local reaps = redis.call('HINCRBY', row, 'reaps', 1)
      if reaps >= 2 or tonumber(fields[1]) - tonumber(fields[2] or '0') + 1 >= max then
        redis.call('SADD', keys.suspects, id)
        redis.call('PEXPIRE', keys.suspects, SUSPECTS_TTL_MS)
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
  wake(keys.wake, returned + released + rung)
  return returned, dead, phantoms, #found == batch, reaped
end

--- @include lanes
-- claim_lanes(p, pending, count, nonce, lease, claimed, reply): claim.lua's grouped part, run only
-- while the ring holds a lane. Serves up to `count` turns:
-- * A lane's turn: LMOVE the ring's head to its tail (one step per job, as EchoMQ's claim does, so
--   both kinds of consumer share one rota) and take that lane's next job (lowest score, then
--   mint order). A lane found empty, paused or at its limit leaves the ring and its turn passes
--   to the next (EchoMQ's claim answers empty there instead); one that this call empties or fills
--   to its limit leaves the ring too.
-- * The ungrouped jobs in `pending` are one more lane: they get a turn once every lane had one
--   since their last (meta.flat_turn counts the lane turns since then, across calls), so neither
--   kind starves the other. The flat turns are left to the caller (the rest of `count`).
-- Each job taken is leased as claim.lua leases one (attempts + 1, state active, the lock, one
-- deadline in active); a member without a usable row is a phantom (dropped, or dead with its
-- reason). Then, last, the jobs leave their lanes by name and gactive counts the leased ones.
-- The leased jobs are appended to `claimed` and to `reply` (id, payload, attempts).
-- Returns: leased (jobs leased), used (turns served to lanes: the caller's count shrinks by it).
--- @include now_ms
--- @include lease_row

-- The state of group g's lane for this call: its key, its depth, how many more jobs its limit
-- allows, and the ids read so far ({} until needed); nil when it cannot be served now.
local function lane_state(p, g)
  local lane = lane_key(p, g)
  local depth = redis.call('ZCARD', lane)
  if depth == 0 or redis.call('SISMEMBER', p .. 'paused', g) == 1 then
    return nil
  end
  local room = depth
  local limit = tonumber(redis.call('HGET', p .. 'glimit', g))
  if limit then
    room = math.min(depth, limit - tonumber(redis.call('HGET', p .. 'gactive', g) or '0'))
  end
  if room <= 0 then
    return nil
  end
  return {lane = lane, room = room, ids = {}, used = 0}
end

-- The next job of a lane (ids are read in chunks of `chunk`, never popped), or nil.
local function lane_next(s, chunk)
  if s.used >= s.room then
    return nil
  end
  if s.used == #s.ids then
    local more = redis.call('ZRANGE', s.lane, s.used, s.used + chunk - 1)
    for _, id in ipairs(more) do
      s.ids[#s.ids + 1] = id
    end
  end
  s.used = s.used + 1
  return s.ids[s.used]
end

-- Lease one grouped job (includes/lease_row.lua); its attempts (the token), or nil for a phantom.
local function lane_lease(p, id, nonce, lease, claimed, reply)
  local attempts, payload = lease_row(p, p .. 'dead', id, nonce, lease)
  if not attempts then
    reply[2] = reply[2] + 1
    return nil
  end
  claimed[#claimed + 1] = id
  reply[#reply + 1] = id
  reply[#reply + 1] = payload
  reply[#reply + 1] = attempts
  return attempts
end

-- The turns of this call: {id, group} per lane turn, in rotation order, and the lanes' states in
-- the order first visited. The flat set's turns are not listed (the caller serves them).
local function lane_turns(p, pending, count)
  local ring, meta = p .. 'ring', p .. 'meta'
  local lanes = redis.call('LLEN', ring)
  local flat_waiting = redis.call('ZCARD', pending)
  local since = tonumber(redis.call('HGET', meta, 'flat_turn')) or 0
  local chunk = math.max(1, math.ceil(count / lanes))
  local turns, states, order, flat = {}, {}, {}, 0
  while #turns + flat < count and lanes > 0 do
    if flat < flat_waiting and since >= lanes then
      flat, since = flat + 1, 0
    else
      local g = redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
      if not g then
        break
      end
      local s = states[g]
      if s == nil then
        s = lane_state(p, g) or false
        states[g] = s
        order[#order + 1] = g
      end
      local id = s and lane_next(s, chunk)
      if id then
        turns[#turns + 1] = {id, g}
        if flat < flat_waiting then
          since = since + 1
        end
      end
      if not id or s.used >= s.room then
        lanes = lanes - redis.call('LREM', ring, 0, g)
      end
    end
  end
  if flat_waiting > 0 then
    redis.call('HSET', meta, 'flat_turn', since)
  end
  return turns, states, order
end

local function claim_lanes(p, pending, count, nonce, lease, claimed, reply)
  local turns, states, order = lane_turns(p, pending, count)
  if #turns == 0 then
    return 0, 0
  end
  local deadline = now_ms() + lease
  local scored, leased_by = {}, {}
  for _, turn in ipairs(turns) do
    if lane_lease(p, turn[1], nonce, lease, claimed, reply) then
      scored[#scored + 1] = deadline
      scored[#scored + 1] = turn[1]
      leased_by[turn[2]] = (leased_by[turn[2]] or 0) + 1
    end
  end
  for first = 1, #scored, 1000 do
    redis.call('ZADD', p .. 'active', unpack(scored, first, math.min(first + 999, #scored)))
  end
  -- Last, the jobs leave their lanes by name (never popped: see claim.lua, Persistence).
  for _, g in ipairs(order) do
    local s = states[g]
    if s and s.used > 0 then
      for first = 1, s.used, 500 do
        redis.call('ZREM', s.lane, unpack(s.ids, first, math.min(first + 499, s.used)))
      end
    end
    if leased_by[g] then
      redis.call('HINCRBY', p .. 'gactive', g, leased_by[g])
    end
  end
  return #scored / 2, #turns
end

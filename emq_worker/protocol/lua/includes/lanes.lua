-- Fair lanes: EchoMQ's grouped keys, shared by every script that moves a grouped job (a row with
-- a `group` field). Under p = "emq:{q}:":
--   g:<group>:pending  ZSET  the lane: the group's ready jobs, scored like pending (the priority,
--                            0 by default), so lowest score first, then mint order
--   ring               LIST  the rota: each lane that can be served now (not empty, not paused,
--                            below its limit), once; a claim moves its head to its tail per job
--   paused             SET   groups whose lane an operator paused (not meta.paused)
--   glimit             HASH  group -> the most jobs of that group leased at once
--   gactive            HASH  group -> jobs of that group leased now (the field goes at 0)
-- The one rule every transition keeps: a lane is on the ring exactly while it is serviceable.

-- lane_key(p, g): the lane of group g.
local function lane_key(p, g)
  return p .. 'g:' .. g .. ':pending'
end

-- lane_open(p, g): the lane of g is neither paused nor at its limit.
local function lane_open(p, g)
  if redis.call('SISMEMBER', p .. 'paused', g) == 1 then
    return false
  end
  local limit = redis.call('HGET', p .. 'glimit', g)
  return not limit or tonumber(redis.call('HGET', p .. 'gactive', g) or '0') < tonumber(limit)
end

-- lane_ring(p, g): put g on the ring when its lane is serviceable and not on it yet. Returns 2
-- when it joined the ring now, 1 when it was on it already, 0 when it cannot be served.
local function lane_ring(p, g)
  if redis.call('ZCARD', lane_key(p, g)) == 0 or not lane_open(p, g) then
    return 0
  end
  if redis.call('LPOS', p .. 'ring', g) then
    return 1
  end
  redis.call('RPUSH', p .. 'ring', g)
  return 2
end

-- lane_ready(p, g, id, score): job `id` waits in its group's lane. Returns 1 when a claim can take
-- it now (a wake is worth pushing), else 0 (its lane is paused or at its limit).
local function lane_ready(p, g, id, score)
  redis.call('ZADD', lane_key(p, g), score, id)
  if lane_ring(p, g) > 0 then
    return 1
  end
  return 0
end

-- lane_left(p, g): a job of group g left `active`: count it out of gactive (the field goes at 0,
-- as EchoMQ's does) and ring the lane if that made it serviceable. Returns 1 when the lane joined
-- the ring now (a parked worker may take its next job), else 0. Only the step from at its limit to
-- below it can change whether the lane is served, so only that step pays lane_ring (whose LPOS
-- walks the ring: with a thousand lanes, the bulk of a settle's cost otherwise).
local function lane_left(p, g)
  local active = redis.call('HINCRBY', p .. 'gactive', g, -1)
  if active <= 0 then
    redis.call('HDEL', p .. 'gactive', g)
  end
  local limit = tonumber(redis.call('HGET', p .. 'glimit', g))
  if limit and active < limit and active + 1 >= limit and lane_ring(p, g) == 2 then
    return 1
  end
  return 0
end

-- lane_tidy(p, g): a job left g's lane without a claim (a late settle, a remove): the lane leaves
-- the ring once it is empty.
local function lane_tidy(p, g)
  if redis.call('ZCARD', lane_key(p, g)) == 0 then
    redis.call('LREM', p .. 'ring', 0, g)
  end
end

-- lane_settled(p, g, left_active): a job of group g was settled out of `active` (then gactive
-- counts it out: lane_left), or, late, out of its lane (lane_tidy). Returns the wake tokens worth
-- pushing (0 or 1).
local function lane_settled(p, g, left_active)
  if left_active then
    return lane_left(p, g)
  end
  lane_tidy(p, g)
  return 0
end

-- make_ready(p, pending, id, group, priority, from_active): put a job where a claim finds it: its
-- group's lane, or `pending`, scored by its priority (the row's `priority` field; 0 when absent).
-- `from_active`: the job is leaving `active`, so its group's gactive counts it out first. Returns
-- the wake tokens worth pushing (0 or 1).
local function make_ready(p, pending, id, group, priority, from_active)
  local score = tonumber(priority) or 0
  if not group then
    redis.call('ZADD', pending, score, id)
    return 1
  end
  if from_active then
    lane_left(p, group)
  end
  return lane_ready(p, group, id, score)
end

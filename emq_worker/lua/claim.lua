-- claim: lease up to `count` ready jobs to one worker, oldest mint first.
--
-- KEYS[1] = emq:{q}:pending
-- KEYS[2] = emq:{q}:active
-- KEYS[3] = emq:{q}:meta
-- KEYS[4] = emq:{q}:dead
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = lease_ms (> 0): the deadline is server TIME + lease_ms
-- ARGV[3] = count (> 0): the most jobs to lease
-- ARGV[4] = nonce: random, unique per claim call; the lock subkey holds "<attempts>:<nonce>"
--
-- Reply: a flat array {status, phantoms, id1, payload1, attempts1, id2, ...}
--   status   = 'ok', or 'paused' when meta.paused is set (nothing is leased)
--   phantoms = pending members that could not become jobs: a member whose row is gone is
--              dropped; a row without a payload goes to dead with a last_error (EchoMQ's D7)
-- Each claim runs HINCRBY attempts 1 (the fencing token), sets state 'active', scores the id in
-- active at the deadline and sets the lock subkey with PX 2 x lease_ms. The ids leased are kept
-- in emq:{q}:claim:<nonce> (PX lease_ms): a claim re-sent with the same nonce (the client retried
-- after a lost reply) returns the jobs the first one leased and still holds, without checking
-- pause again, instead of stranding them until the reaper.
--- @include now_ms
local p, lease, count, nonce = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local memo = p .. 'claim:' .. nonce
local reply = {'ok', 0}
if redis.call('EXISTS', memo) == 1 then
  for _, id in ipairs(redis.call('LRANGE', memo, 0, -1)) do
    local row = p .. 'job:' .. id
    local fields = redis.call('HMGET', row, 'attempts', 'payload')
    if fields[1] and redis.call('GET', row .. ':lock') == fields[1] .. ':' .. nonce then
      reply[#reply + 1] = id
      reply[#reply + 1] = fields[2]
      reply[#reply + 1] = tonumber(fields[1])
    end
  end
  return reply
end
if redis.call('HEXISTS', KEYS[3], 'paused') == 1 then
  return {'paused', 0}
end
local popped = redis.call('ZPOPMIN', KEYS[1], count)
if #popped == 0 then
  return reply
end
local deadline = now_ms() + lease
local claimed = {}
for i = 1, #popped, 2 do
  local id = popped[i]
  local row = p .. 'job:' .. id
  local payload = redis.call('HGET', row, 'payload')
  if not payload and redis.call('EXISTS', row) == 1 then
    redis.call('ZADD', KEYS[4], 0, id)
    redis.call('HSET', row, 'state', 'dead', 'last_error', 'row has no payload')
    reply[2] = reply[2] + 1
  elseif payload then
    local attempts = redis.call('HINCRBY', row, 'attempts', 1)
    redis.call('HSET', row, 'state', 'active')
    redis.call('SET', row .. ':lock', attempts .. ':' .. nonce, 'PX', 2 * lease)
    claimed[#claimed + 1] = id
    reply[#reply + 1] = id
    reply[#reply + 1] = payload
    reply[#reply + 1] = attempts
  else
    reply[2] = reply[2] + 1
  end
end
-- One ZADD and one RPUSH per 500 jobs rather than per job (unpack() has a stack limit of a few
-- thousand values).
for first = 1, #claimed, 500 do
  local last = math.min(first + 499, #claimed)
  local scored = {}
  for i = first, last do
    scored[#scored + 1] = deadline
    scored[#scored + 1] = claimed[i]
  end
  redis.call('ZADD', KEYS[2], unpack(scored))
  redis.call('RPUSH', memo, unpack(claimed, first, last))
end
if #claimed > 0 then
  redis.call('PEXPIRE', memo, lease)
end
return reply

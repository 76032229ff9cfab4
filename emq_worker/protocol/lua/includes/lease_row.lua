--- @include attempts
-- lease_row(p, dead, id, nonce, lease): lease the ready job `id` to the claim with `nonce`, as
-- claim.lua does for pending and lanes_claim.lua for a lane: attempts + 1 (the fencing token),
-- state 'active' and the lock subkey "<attempts>:<nonce>" with PX 2 x lease. Scoring it in active,
-- and taking it out of the set it waited in, are the caller's. Returns its attempts and payload.
-- A row that cannot become a job (read without raising: a key that is not a hash, no payload, a
-- payload over LEASE_PAYLOAD_LIMIT (never read), or an attempts field that is not an integer)
-- goes to the ZSET `dead` with its reason (EchoMQ's D7), its integer attempts + 1 (the late
-- holder of a job reaped back is fenced out: fence_out_holder); a member without a row is dropped.
-- Either way it returns nil: a phantom.
local LEASE_PAYLOAD_LIMIT = 16777216 -- emq_worker.protocol.payload_limits.MAX_PAYLOAD_BYTES

local function lease_row(p, dead, id, nonce, lease)
  local row = p .. 'job:' .. id
  local size = redis.pcall('HSTRLEN', row, 'payload')
  local payload, attempts = nil, nil
  if type(size) == 'number' and size <= LEASE_PAYLOAD_LIMIT then
    local fields = redis.call('HMGET', row, 'payload', 'attempts')
    payload = fields[1]
    attempts = payload and next_attempt(fields[2])
    if attempts then
      redis.call('HSET', row, 'state', 'active', 'attempts', attempts)
    elseif payload then
      attempts = redis.pcall('HINCRBY', row, 'attempts', 1)
      if type(attempts) == 'number' then
        redis.call('HSET', row, 'state', 'active')
      end
    end
  end
  if type(attempts) == 'number' then
    redis.call('SET', row .. ':lock', lock_value(attempts, nonce), 'PX', 2 * lease)
    return attempts, payload
  end
  if redis.call('EXISTS', row) == 1 then
    redis.call('ZADD', dead, 0, id)
    if type(size) == 'number' then
      local reason = 'row has no payload'
      if size > LEASE_PAYLOAD_LIMIT then
        reason = 'payload is ' .. size .. ' bytes, over the limit of ' .. LEASE_PAYLOAD_LIMIT
      elseif payload then
        reason = 'attempts is not an integer: ' .. tostring(redis.call('HGET', row, 'attempts'))
      end
      redis.call('HSET', row, 'state', 'dead', 'last_error', reason)
    end
    fence_out_holder(row) -- a job reaped back here may still have a late holder
  end
  return nil
end

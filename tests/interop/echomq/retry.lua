-- EchoMQ's retry (echo_mq/jobs.ex `@retry`, as read at fiberfx 5eca83fa; ≈L445-510 at
-- be97a9bf), restated without its flow hook (flow_retry.lua has that): the script Jobs.retry/7
-- runs for every job, flat or grouped. The token check only (D8); the group bookkeeping as its
-- complete does, or out of pending when a flat job was not in active; last_error; then dead at
-- the cap on the raw attempts (att >= max_attempts, attempts_base unknown to it: D11;
-- metrics:failed + 1) or scheduled at now + delay. A retried grouped job goes to schedule, never
-- straight to its lane.
-- KEYS[1] = p active, KEYS[2] = p schedule, KEYS[3] = p dead, KEYS[4] = the row; ARGV[1] = id,
-- ARGV[2] = token, ARGV[3] = delay_ms, ARGV[4] = max_attempts, ARGV[5] = error, ARGV[6] = p.
-- Reply: "scheduled" or "dead". Errors: EMQSTALE (gone or token mismatch).
local id, p = ARGV[1], ARGV[6]
local att = redis.call('HGET', KEYS[4], 'attempts')
if not att then
  return redis.error_reply('EMQSTALE job gone')
end
if att ~= ARGV[2] then
  return redis.error_reply('EMQSTALE retry token mismatch')
end
local group = redis.call('HGET', KEYS[4], 'group')
local was_active = redis.call('ZREM', KEYS[1], id)
if group and was_active == 1 then
  left_active(p, group)
  back_in_ring(p, group, true)
elseif group then
  local lane = p .. 'g:' .. group .. ':pending'
  redis.call('ZREM', lane, id)
  if redis.call('ZCARD', lane) == 0 then
    redis.call('LREM', p .. 'ring', 0, group)
  end
elseif was_active == 0 then
  redis.call('ZREM', p .. 'pending', id)
end
redis.call('HSET', KEYS[4], 'last_error', ARGV[5])
if tonumber(att) >= tonumber(ARGV[4]) then
  redis.call('HSET', KEYS[4], 'state', 'dead')
  redis.call('ZADD', KEYS[3], 0, id)
  redis.call('HINCRBY', p .. 'metrics:failed', 'count', 1)
  return 'dead'
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[4], 'state', 'scheduled')
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), id)
return 'scheduled'

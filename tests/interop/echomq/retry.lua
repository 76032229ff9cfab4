-- EchoMQ's flat retry: token check, then scheduled (now + delay) or dead at the cap.
-- KEYS[1] = p active, KEYS[2] = p schedule, KEYS[3] = p dead, KEYS[4] = the job row;
-- ARGV[1] = id, ARGV[2] = token, ARGV[3] = delay_ms, ARGV[4] = max_attempts, ARGV[5] = error,
-- ARGV[6] = p. Reply: "scheduled" or "dead". Errors: EMQSTALE (gone or token mismatch).
local id = ARGV[1]
local att = redis.call('HGET', KEYS[4], 'attempts')
if not att then
  return redis.error_reply('EMQSTALE job gone')
end
if att ~= ARGV[2] then
  return redis.error_reply('EMQSTALE retry token mismatch')
end
if redis.call('ZREM', KEYS[1], id) == 0 then
  redis.call('ZREM', ARGV[6] .. 'pending', id)
end
redis.call('HSET', KEYS[4], 'last_error', ARGV[5])
if tonumber(att) >= tonumber(ARGV[4]) then
  redis.call('HSET', KEYS[4], 'state', 'dead')
  redis.call('ZADD', KEYS[3], 0, id)
  redis.call('HINCRBY', ARGV[6] .. 'metrics:failed', 'count', 1)
  return 'dead'
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[4], 'state', 'scheduled')
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), id)
return 'scheduled'

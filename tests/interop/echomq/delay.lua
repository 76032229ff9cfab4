-- EchoMQ's delay: token check only; ZREM active unchecked, so a job reaped back to pending is
-- also put in schedule while it stays in pending (D8).
-- KEYS[1] = the job row, KEYS[2] = p active, KEYS[3] = p schedule; ARGV[1] = id, ARGV[2] = token,
-- ARGV[3] = "in" or "at", ARGV[4] = ms. Reply: 1. Errors: EMQSTALE (gone, token mismatch).
local id = ARGV[1]
local att = redis.call('HGET', KEYS[1], 'attempts')
if not att then
  return redis.error_reply('EMQSTALE job gone')
end
if att ~= ARGV[2] then
  return redis.error_reply('EMQSTALE delay token mismatch')
end
redis.call('ZREM', KEYS[2], id)
redis.call('HSET', KEYS[1], 'state', 'scheduled')
local score = tonumber(ARGV[4])
if ARGV[3] == 'in' then
  local t = redis.call('TIME')
  score = score + tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
redis.call('ZADD', KEYS[3], score, id)
return 1

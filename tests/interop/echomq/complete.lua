-- EchoMQ's flat complete: checks the token, not the state (D8); deletes only the row (D9).
-- KEYS[1] = p active, KEYS[2] = the job row; ARGV[1] = id, ARGV[2] = token, ARGV[3] = p.
-- Reply: 1 completed, 0 gone. Error: EMQSTALE on a token mismatch.
local att = redis.call('HGET', KEYS[2], 'attempts')
if not att then
  return 0
end
if att ~= ARGV[2] then
  return redis.error_reply('EMQSTALE complete token mismatch')
end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  redis.call('ZREM', ARGV[3] .. 'pending', ARGV[1])
end
redis.call('DEL', KEYS[2])
redis.call('HINCRBY', ARGV[3] .. 'metrics:completed', 'count', 1)
return 1

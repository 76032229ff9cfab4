-- EchoMQ's reprocess_job: a dead job back to pending, attempts kept (D11).
-- KEYS[1] = the job row, KEYS[2] = p dead, KEYS[3] = p pending; ARGV[1] = id.
-- Reply: 1, or -1 gone. Error: EMQSTATE not dead.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if redis.call('ZREM', KEYS[2], ARGV[1]) ~= 1 then
  return redis.error_reply('EMQSTATE not dead')
end
redis.call('HDEL', KEYS[1], 'last_error')
redis.call('HSET', KEYS[1], 'state', 'pending')
redis.call('ZADD', KEYS[3], 0, ARGV[1])
return 1

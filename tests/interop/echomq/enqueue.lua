-- EchoMQ's flat enqueue (wire notes section 4, enqueue), restated for the interop tests.
-- KEYS[1] = the job row, KEYS[2] = p pending; ARGV[1] = id, ARGV[2] = payload.
-- Reply: 1 enqueued, 0 duplicate. No wake (D3).
if string.sub(ARGV[1], 1, 3) ~= 'JOB' then
  return redis.error_reply('EMQKIND job id must be JOB-namespaced')
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'pending', 'attempts', '0', 'payload', ARGV[2])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1

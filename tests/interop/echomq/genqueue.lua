-- EchoMQ's grouped enqueue (Lanes.enqueue), restated: kind check; a present row is a duplicate;
-- the four-field row (group last); the id into the group's lane at score 0; then, unless the group
-- is paused, the lane joins the ring (with one wake, LTRIM 0 63) if below its limit and not on it.
-- KEYS[1] = the row, KEYS[2] = p g:<group>:pending, KEYS[3] = p ring, KEYS[4] = p paused,
-- KEYS[5] = p glimit, KEYS[6] = p gactive, KEYS[7] = p wake; ARGV[1] = id, ARGV[2] = payload,
-- ARGV[3] = group. Reply: 1 enqueued, 0 duplicate. Error: EMQKIND.
local id, group = ARGV[1], ARGV[3]
if string.sub(id, 1, 3) ~= 'JOB' then
  return redis.error_reply('EMQKIND job id must be JOB-namespaced')
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'pending', 'attempts', '0', 'payload', ARGV[2], 'group', group)
redis.call('ZADD', KEYS[2], 0, id)
if redis.call('SISMEMBER', KEYS[4], group) == 1 then
  return 1
end
local cap = redis.call('HGET', KEYS[5], group)
local running = tonumber(redis.call('HGET', KEYS[6], group) or '0')
if (not cap or running < tonumber(cap)) and not redis.call('LPOS', KEYS[3], group) then
  redis.call('RPUSH', KEYS[3], group)
  redis.call('LPUSH', KEYS[7], '1')
  redis.call('LTRIM', KEYS[7], 0, 63)
end
return 1

-- EchoMQ's Lanes.limit, restated: glimit[group] = n; at or over it the lane leaves the ring, below
-- it the lane joins (one wake) when it has members, is not paused and is not on it.
-- KEYS[1] = p glimit, KEYS[2] = p ring; ARGV[1] = p, ARGV[2] = group, ARGV[3] = n. Reply: 1.
local p, group, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
redis.call('HSET', KEYS[1], group, n)
if tonumber(redis.call('HGET', p .. 'gactive', group) or '0') >= n then
  redis.call('LREM', KEYS[2], 0, group)
else
  back_in_ring(p, group, true)
end
return 1

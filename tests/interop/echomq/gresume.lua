-- EchoMQ's Lanes.resume, restated: out of paused; the lane back on the ring (one wake) when it has
-- members, is below its limit and is not on it.
-- KEYS[1] = p paused, KEYS[2] = p ring; ARGV[1] = p, ARGV[2] = group. Reply: 1.
redis.call('SREM', KEYS[1], ARGV[2])
back_in_ring(ARGV[1], ARGV[2], true)
return 1

-- EchoMQ's Lanes.pause, restated: the group into paused, its lane off the ring.
-- KEYS[1] = p paused, KEYS[2] = p ring; ARGV[1] = group. Reply: 1.
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('LREM', KEYS[2], 0, ARGV[1])
return 1

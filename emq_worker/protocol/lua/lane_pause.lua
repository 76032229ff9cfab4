-- lane_pause: take a group's lane out of rotation, as EchoMQ's Lanes.pause does; its jobs wait,
-- and its running jobs run on.
--
-- KEYS[1] = emq:{q}:paused (SET of paused groups; not meta.paused, which pauses the whole queue)
-- KEYS[2] = emq:{q}:ring
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = group
--
-- Reply: 1 when the group was paused now, 0 when it was paused already.
local added = redis.call('SADD', KEYS[1], ARGV[2])
redis.call('LREM', KEYS[2], 0, ARGV[2])
return added

-- lane_limit: set (or clear) how many jobs of one group may be leased at once, as EchoMQ's
-- Lanes.limit does. A lane at or over its new limit leaves the ring (its running jobs run on);
-- one below it (or without one now) joins the ring when it has jobs, and wakes a parked worker.
--
-- KEYS[1] = emq:{q}:glimit (HASH group -> limit)
-- KEYS[2] = emq:{q}:ring
-- KEYS[3] = emq:{q}:wake
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = group
-- ARGV[3] = limit (>= 1), or 0 to clear it (EchoMQ has no verb for that: HDEL glimit)
--
-- Reply: 1.
--- @include wake
--- @include lanes
local p, group, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
if limit > 0 then
  redis.call('HSET', KEYS[1], group, limit)
else
  redis.call('HDEL', KEYS[1], group)
end
if not lane_open(p, group) then
  redis.call('LREM', KEYS[2], 0, group)
elseif lane_ring(p, group) == 2 then
  wake(KEYS[3], 1)
end
return 1

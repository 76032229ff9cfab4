-- lane_resume: return a paused group's lane to rotation, as EchoMQ's Lanes.resume does: it joins
-- the ring when it has jobs and is below its limit, and then wakes one parked worker.
--
-- KEYS[1] = emq:{q}:paused
-- KEYS[2] = emq:{q}:ring
-- KEYS[3] = emq:{q}:wake
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = group
--
-- Reply: 1 when the group was paused (and is no more), 0 when it was not.
--- @include wake
--- @include lanes
local removed = redis.call('SREM', KEYS[1], ARGV[2])
if lane_ring(ARGV[1], ARGV[2]) == 2 then
  wake(KEYS[3], 1)
end
return removed

-- EchoMQ's reap with its grouped branch, restated: up to 100 expired leases (server clock), each
-- out of active; a grouped one is counted out of gactive and goes back to its lane at score 0 (its
-- priority is lost), the lane back on the ring; a flat one to pending at score 0. No cap (D2).
-- KEYS[1] = p active, KEYS[2] = p pending; ARGV[1] = p. Reply: the count.
local p = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 100)
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  local row = p .. 'job:' .. id
  local group = redis.call('HGET', row, 'group')
  if group then
    left_active(p, group)
    redis.call('ZADD', p .. 'g:' .. group .. ':pending', 0, id)
    back_in_ring(p, group, false)
  else
    redis.call('ZADD', KEYS[2], 0, id)
  end
  redis.call('HSET', row, 'state', 'pending')
end
return #expired

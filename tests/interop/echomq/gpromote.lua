-- EchoMQ's promote with its grouped branch, restated: due ids out of schedule; a grouped one into
-- its lane at score 0, the lane on the ring when it can be served; a flat one to pending at 0.
-- KEYS[1] = p schedule, KEYS[2] = p pending; ARGV[1] = p, ARGV[2] = batch. Reply: the count.
local p = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[1], id)
  local row = p .. 'job:' .. id
  local group = redis.call('HGET', row, 'group')
  if group then
    redis.call('ZADD', p .. 'g:' .. group .. ':pending', 0, id)
    back_in_ring(p, group, false)
  else
    redis.call('ZADD', KEYS[2], 0, id)
  end
  redis.call('HSET', row, 'state', 'pending')
end
return #due

-- EchoMQ's grouped branch, shared by its complete, retry, promote and reap (restated here once;
-- each caller script inlines this text before its own). back_in_ring(p, g) puts g on the ring,
-- with one wake, when its lane has members (`check_depth`), it is not paused, it is below its
-- limit and not on the ring; left_active(p, g) is the count-out: gactive - 1, HDEL at <= 0.
local function back_in_ring(p, g, check_depth)
  if redis.call('SISMEMBER', p .. 'paused', g) == 1 then
    return
  end
  if check_depth and redis.call('ZCARD', p .. 'g:' .. g .. ':pending') == 0 then
    return
  end
  local cap = redis.call('HGET', p .. 'glimit', g)
  local running = tonumber(redis.call('HGET', p .. 'gactive', g) or '0')
  if (not cap or running < tonumber(cap)) and not redis.call('LPOS', p .. 'ring', g) then
    redis.call('RPUSH', p .. 'ring', g)
    redis.call('LPUSH', p .. 'wake', '1')
    redis.call('LTRIM', p .. 'wake', 0, 63)
  end
end
local function left_active(p, g)
  if redis.call('HINCRBY', p .. 'gactive', g, -1) <= 0 then
    redis.call('HDEL', p .. 'gactive', g)
  end
end

-- EchoMQ's flat promote (the Pump runs it): due ids from schedule to pending, state pending, with
-- no EXISTS check (D7) and no wake (D3). KEYS[1] = p schedule, KEYS[2] = p pending;
-- ARGV[1] = p, ARGV[2] = batch. Reply: the count.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], 0, id)
  redis.call('HSET', ARGV[1] .. 'job:' .. id, 'state', 'pending')
end
return #due

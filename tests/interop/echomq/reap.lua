-- EchoMQ's flat reap: no cap (D2), no last_error, no wake (D3), no EXISTS check (D7).
-- KEYS[1] = p active, KEYS[2] = p pending; ARGV[1] = p. Reply: the count.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 100)
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], 0, id)
  redis.call('HSET', ARGV[1] .. 'job:' .. id, 'state', 'pending')
end
return #expired

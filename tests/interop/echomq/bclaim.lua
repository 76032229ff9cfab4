-- EchoMQ's claim_batch (bclaim): ZPOPMIN up to `size` ids, HINCRBY attempts, state active, one
-- shared deadline. No EXISTS check (D7); the pause gate is a separate host-side HGET (D6).
-- KEYS[1] = p pending, KEYS[2] = p active; ARGV[1] = p.."job:", ARGV[2] = lease_ms, ARGV[3] = size.
-- Reply: {{id, payload, attempts}, ...} in mint order.
local depth = redis.call('ZCARD', KEYS[1])
if depth == 0 then
  return {}
end
local k = math.min(tonumber(ARGV[3]), depth)
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
local out = {}
for _ = 1, k do
  local popped = redis.call('ZPOPMIN', KEYS[1])
  local id = popped[1]
  local row = ARGV[1] .. id
  local att = redis.call('HINCRBY', row, 'attempts', 1)
  redis.call('HSET', row, 'state', 'active')
  redis.call('ZADD', KEYS[2], deadline, id)
  out[#out + 1] = {id, redis.call('HGET', row, 'payload'), att}
end
return out

-- EchoMQ's grouped claim (Lanes.claim after its host-side pause gate), restated: rotate the ring
-- one step (LMOVE LEFT RIGHT), pop that lane's lowest member, lease it (no row check: D7), count
-- it in gactive, and take the lane off the ring when it reached its limit or ran empty. A stale
-- ring entry (an empty lane) is removed and the call answers empty, even if other lanes wait.
-- KEYS[1] = p ring, KEYS[2] = p active; ARGV[1] = p, ARGV[2] = lease_ms.
-- Reply: {} or {id, payload, attempts, group}.
local p = ARGV[1]
local group = redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT')
if not group then
  return {}
end
local lane = p .. 'g:' .. group .. ':pending'
local head = redis.call('ZPOPMIN', lane)
if #head == 0 then
  redis.call('LREM', KEYS[1], 0, group)
  return {}
end
local id = head[1]
local row = p .. 'job:' .. id
local attempts = redis.call('HINCRBY', row, 'attempts', 1)
redis.call('HSET', row, 'state', 'active')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), id)
local running = redis.call('HINCRBY', p .. 'gactive', group, 1)
local cap = redis.call('HGET', p .. 'glimit', group)
if (cap and running >= tonumber(cap)) or redis.call('ZCARD', lane) == 0 then
  redis.call('LREM', KEYS[1], 0, group)
end
return {id, redis.call('HGET', row, 'payload'), attempts, group}

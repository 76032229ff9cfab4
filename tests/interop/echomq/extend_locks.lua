-- EchoMQ's extend_locks (renew many): a plain ZADD with no XX and no state check (D1), so a
-- job reaped, retried or dead-lettered meanwhile is put back into active.
-- KEYS[1] = p active; ARGV[1] = p, ARGV[2] = lease_ms, then id, token pairs.
-- Reply: the ids that failed (stale and gone alike).
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
local failed = {}
for i = 3, #ARGV, 2 do
  local id, tok = ARGV[i], ARGV[i + 1]
  if redis.call('HGET', ARGV[1] .. 'job:' .. id, 'attempts') == tok then
    redis.call('ZADD', KEYS[1], deadline, id)
  else
    failed[#failed + 1] = id
  end
end
return failed

-- EchoMQ's stalled sweep (flat branch): every expired lease gets `stalled` +1; at max_stalled
-- (default 1) it is dead-lettered with last_error "stalled", else returned to pending. Neither
-- branch touches the job's :lock subkey.
-- KEYS[1] = p active, KEYS[2] = p pending, KEYS[3] = p dead; ARGV[1] = p, ARGV[2] = max_stalled,
-- ARGV[3] = limit. Reply: {recovered_ids, dead_ids}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local recovered, dead = {}, {}
for _, id in ipairs(exp) do
  local row = ARGV[1] .. 'job:' .. id
  redis.call('ZREM', KEYS[1], id)
  local st = redis.call('HINCRBY', row, 'stalled', 1)
  if st >= tonumber(ARGV[2]) then
    redis.call('HSET', row, 'state', 'dead', 'last_error', 'stalled')
    redis.call('ZADD', KEYS[3], 0, id)
    redis.call('HINCRBY', ARGV[1] .. 'metrics:failed', 'count', 1)
    dead[#dead + 1] = id
  else
    redis.call('ZADD', KEYS[2], 0, id)
    redis.call('HSET', row, 'state', 'pending')
    recovered[#recovered + 1] = id
  end
end
return {recovered, dead}

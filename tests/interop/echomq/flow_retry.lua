-- EchoMQ's retry with its flow hook (flat branch): at the cap a flow child, after its own move
-- to dead, tells its parent by the marker the host passes (ARGV[7]): 'sq:fp' fails a same-queue
-- parent (no last_error, no check of its state), 'sq:id' counts it done (release without a
-- wake), 'xq:fp' / 'xq:id' push a death entry to the child's own outbox.
-- KEYS[1] = p active, KEYS[2] = p schedule, KEYS[3] = p dead, KEYS[4] = the row; same queue:
-- KEYS[5] = parent :failed, KEYS[6] = parent :unsuccessful, KEYS[7] = parent :dependencies,
-- KEYS[8] = the parent row, ARGV[8] = parent id; other queue: KEYS[5] = p flow:outbox,
-- ARGV[8] = parent queue, ARGV[9] = parent id. ARGV[1] = id, ARGV[2] = token, ARGV[3] = delay,
-- ARGV[4] = max, ARGV[5] = error, ARGV[6] = p.
-- Reply: "scheduled" or "dead". Errors: EMQSTALE.
local id, p = ARGV[1], ARGV[6]
local att = redis.call('HGET', KEYS[4], 'attempts')
if not att then
  return redis.error_reply('EMQSTALE job gone')
end
if att ~= ARGV[2] then
  return redis.error_reply('EMQSTALE retry token mismatch')
end
if redis.call('ZREM', KEYS[1], id) == 0 then
  redis.call('ZREM', p .. 'pending', id)
end
redis.call('HSET', KEYS[4], 'last_error', ARGV[5])
if tonumber(att) < tonumber(ARGV[4]) then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', KEYS[4], 'state', 'scheduled')
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), id)
  return 'scheduled'
end
redis.call('HSET', KEYS[4], 'state', 'dead')
redis.call('ZADD', KEYS[3], 0, id)
redis.call('HINCRBY', p .. 'metrics:failed', 'count', 1)
local marker = ARGV[7]
if marker == 'sq:fp' then
  redis.call('HSET', KEYS[5], id, ARGV[5])
  redis.call('HSET', KEYS[8], 'state', 'dead')
  redis.call('ZADD', p .. 'dead', 0, ARGV[8])
  redis.call('ZREM', p .. 'pending', ARGV[8])
elseif marker == 'sq:id' then
  redis.call('HSET', KEYS[6], id, ARGV[5])
  if redis.call('DECR', KEYS[7]) <= 0 then
    redis.call('ZADD', p .. 'pending', 0, ARGV[8])
    redis.call('HSET', KEYS[8], 'state', 'pending')
  end
elseif marker == 'xq:fp' or marker == 'xq:id' then
  local entry = {'', 'fail', ARGV[8], ARGV[9], id, string.sub(marker, 4), ARGV[5]}
  redis.call('RPUSH', KEYS[5], table.concat(entry, '\0'))
end
return 'dead'

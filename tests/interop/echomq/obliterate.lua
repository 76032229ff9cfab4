-- EchoMQ's obliterate (flat part): refuses unless paused, and with active jobs unless forced;
-- pages through active, pending, schedule and dead deleting each row, :logs and :lock; then
-- deletes the queue's known keys by name (meta included, so the queue ends unpaused).
-- KEYS[1] = p meta, KEYS[2] = p; ARGV[1] = "force" or "", ARGV[2] = budget.
-- Reply: 0 done, 1 more (budget spent). Error: EMQSTATE not paused / active jobs present.
local p, budget = KEYS[2], tonumber(ARGV[2])
if redis.call('HEXISTS', KEYS[1], 'paused') == 0 then
  return redis.error_reply('EMQSTATE not paused')
end
if ARGV[1] ~= 'force' and #redis.call('ZRANGE', p .. 'active', 0, budget - 1) > 0 then
  return redis.error_reply('EMQSTATE active jobs present')
end
for _, set in ipairs({'active', 'pending', 'schedule', 'dead'}) do
  local ids = redis.call('ZRANGE', p .. set, 0, budget - 1)
  for _, id in ipairs(ids) do
    local row = p .. 'job:' .. id
    redis.call('DEL', row, row .. ':logs', row .. ':lock')
    redis.call('ZREM', p .. set, id)
    budget = budget - 1
  end
  if budget <= 0 then
    return 1
  end
end
for _, name in ipairs({'metrics:completed', 'metrics:failed', 'metrics:completed:data',
    'metrics:failed:data', 'gactive', 'glimit', 'ring', 'wake', 'paused', 'repeat', 'limiter',
    'meta'}) do
  redis.call('DEL', p .. name)
end
return 0

-- obliterate: delete a paused queue's jobs and keys, as EchoMQ's obliterate does, and the keys
-- of ours it does not know by name. The caller sweeps what no name reaches (claim memos,
-- hand-off lists, de:<did> keys without a job: admin/whole_queue.py) once this replies done.
--
-- KEYS[1] = emq:{q}:meta
-- KEYS[2] = emq:{q}:active
-- KEYS[3] = emq:{q}:pending
-- KEYS[4] = emq:{q}:schedule
-- KEYS[5] = emq:{q}:dead
-- KEYS[6] = emq:{q}:repeat
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = "force" to go ahead with active jobs (their holders' settles then answer gone), or ""
-- ARGV[3] = budget: the most jobs to delete in this call (the caller calls again while more)
--
-- Reply: {more, deleted}: more = 1 when the budget was used up (call again), 0 when done; then
--        the queue's own keys are gone too, meta included (so it ends unpaused, as EchoMQ's).
-- Errors: EMQSTATE not paused: <q> (meta has no `paused`); EMQSTATE active jobs present: <n>
--         (without force). Nothing changed when either fires.
--- @include forget
local p, budget = ARGV[1], tonumber(ARGV[3])
local q = string.sub(p, 6, -3)
if redis.call('HEXISTS', KEYS[1], 'paused') == 0 then
  return redis.error_reply('EMQSTATE not paused: ' .. q)
end
local running = redis.call('ZCARD', KEYS[2])
if ARGV[2] ~= 'force' and running > 0 then
  return redis.error_reply('EMQSTATE active jobs present: ' .. running)
end
local deleted = 0
for i = 2, 5 do
  for _, id in ipairs(redis.call('ZRANGE', KEYS[i], 0, budget - deleted - 1)) do
    forget(p, id, p .. 'job:' .. id)
    redis.call('ZREM', KEYS[i], id)
    deleted = deleted + 1
  end
  if deleted >= budget then
    return {1, deleted}
  end
end
for _, name in ipairs(redis.call('ZRANGE', KEYS[6], 0, -1)) do
  redis.call('DEL', p .. 'repeat:' .. name)
end
-- Ours (suspects, cancel, offers) and EchoMQ's known names, grouped ones included.
for _, name in ipairs({'suspects', 'cancel', 'offers', 'wake', 'limiter', 'repeat',
    'metrics:completed', 'metrics:failed', 'metrics:completed:data', 'metrics:failed:data',
    'gactive', 'glimit', 'ring', 'paused', 'flow:outbox', 'flow:held'}) do
  redis.call('DEL', p .. name)
end
redis.call('DEL', KEYS[1])
return {0, deleted}

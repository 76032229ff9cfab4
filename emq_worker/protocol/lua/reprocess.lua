-- reprocess: give a dead job a fresh budget of attempts and return it to pending.
--
-- KEYS[1] = emq:{q}:dead
-- KEYS[2] = emq:{q}:pending
-- KEYS[3] = emq:{q}:wake
-- KEYS[4] = emq:{q}:suspects (the job's id is SREMed and its `reaps` count dropped: it starts
--           afresh, not as a suspect)
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = job id
--
-- Reply: 1 reprocessed, -1 gone (no row).
-- Errors: EMQSTATE when the job is not in dead.
-- attempts is kept (it is the fencing token and only climbs); attempts_base records it, so the
-- retry budget counts from here (EchoMQ keeps attempts and dead-letters the next failure: D11).
--- @include fence
local p, id = ARGV[1], ARGV[2]
local row = p .. 'job:' .. id
if redis.call('EXISTS', row) == 0 then
  return -1
end
if redis.call('ZREM', KEYS[1], id) ~= 1 then
  return redis.error_reply('EMQSTATE not dead: ' .. id)
end
redis.call('HDEL', row, 'last_error', 'reaps')
redis.call('HSET', row, 'state', 'pending',
  'attempts_base', redis.call('HGET', row, 'attempts') or '0')
redis.call('ZADD', KEYS[2], 0, id)
redis.call('SREM', KEYS[4], id)
wake(KEYS[3], 1)
return 1

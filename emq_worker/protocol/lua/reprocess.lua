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
-- Reply: 1 reprocessed, -1 gone (no row; an id left in dead without its row, by EchoMQ's late
--        complete of a job we dead-lettered, is ZREMed).
-- Errors: EMQSTATE when the job is not in dead; EMQLOCK when a lock still holds it
--         (includes/holds.lua). A lapsed lock (a marker of ours, a `lock` field without TTL) is
--         deleted, so no client's remove refuses the job for it later.
-- attempts is kept (it is the fencing token and only climbs); attempts_base records it, so the
-- retry budget counts from here (EchoMQ keeps attempts and dead-letters the next failure: D11).
--- @include fence
--- @include holds
--- @include lanes
local p, id = ARGV[1], ARGV[2]
local row = p .. 'job:' .. id
if redis.call('EXISTS', row) == 0 then
  redis.call('ZREM', KEYS[1], id)
  redis.call('SREM', KEYS[4], id)
  return -1
end
if not redis.call('ZSCORE', KEYS[1], id) then
  return redis.error_reply('EMQSTATE not dead: ' .. id)
end
if lock_hold(row, redis.call('HGET', row, 'state')) then
  return redis.error_reply('EMQLOCK job is locked: ' .. id)
end
redis.call('ZREM', KEYS[1], id)
redis.call('DEL', row .. ':lock')
redis.call('HDEL', row, 'last_error', 'reaps', 'lock')
redis.call('HSET', row, 'state', 'pending',
  'attempts_base', redis.call('HGET', row, 'attempts') or '0')
local kept = redis.call('HMGET', row, 'group', 'priority')
make_ready(p, KEYS[2], id, kept[1], kept[2], false) -- its lane, or pending, at its priority
redis.call('SREM', KEYS[4], id)
wake(KEYS[3], 1)
return 1

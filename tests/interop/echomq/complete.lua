-- EchoMQ's complete (echo_mq/jobs.ex `@complete`, as read at fiberfx 5eca83fa; ≈L365-415 at
-- be97a9bf), restated without its flow hook (flow_complete.lua has that, for a row with a parent):
-- the script Jobs.complete/5 runs for every job, flat or grouped, so it dispatches on the row's
-- group field itself. The token check only, never the state (D8): a job our reaper returned to
-- pending, or dead-lettered, is completed by its last holder's token. Then, for a row with a
-- group: out of active -> gactive - 1 and the lane back on the ring; not in active (a reaped job)
-- -> out of its lane, the lane off the ring once empty. A row without a group: out of pending
-- when not in active (and never out of dead). DEL the row (only the row: D9), count the completion.
-- KEYS[1] = p active, KEYS[2] = the row; ARGV[1] = id, ARGV[2] = token, ARGV[3] = p.
-- Reply: 1 completed, 0 gone. Error: EMQSTALE.
local id, p = ARGV[1], ARGV[3]
local att = redis.call('HGET', KEYS[2], 'attempts')
if not att then
  return 0
end
if att ~= ARGV[2] then
  return redis.error_reply('EMQSTALE complete token mismatch')
end
local group = redis.call('HGET', KEYS[2], 'group')
local was_active = redis.call('ZREM', KEYS[1], id)
if group and was_active == 1 then
  left_active(p, group)
  back_in_ring(p, group, true)
elseif group then
  local lane = p .. 'g:' .. group .. ':pending'
  redis.call('ZREM', lane, id)
  if redis.call('ZCARD', lane) == 0 then
    redis.call('LREM', p .. 'ring', 0, group)
  end
elseif was_active == 0 then
  redis.call('ZREM', p .. 'pending', id)
end
redis.call('DEL', KEYS[2])
redis.call('HINCRBY', p .. 'metrics:completed', 'count', 1)
return 1

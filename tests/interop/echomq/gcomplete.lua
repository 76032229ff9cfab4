-- EchoMQ's complete with its grouped branch (no flow parent), restated: the token check; then, for
-- a row with a group: out of active -> gactive - 1 and the lane back on the ring; not in active
-- (a reaped job) -> out of its lane, the lane off the ring once empty. A row without a group is
-- the flat complete (out of pending when not in active). DEL the row, count the completion.
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

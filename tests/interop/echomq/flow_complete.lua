-- EchoMQ's complete with its flow hook (flat branch). The host read the row's parent and
-- parent_queue first and passes, for a child, either the parent's keys (same queue) or its own
-- outbox and 'xq' (other queue). The count fires only when the id was in active (a late
-- complete of a reaped child counts nothing), the release checks no state and pushes no wake.
-- KEYS[1] = p active, KEYS[2] = the row; same-queue child: KEYS[3] = parent :dependencies,
-- KEYS[4] = parent :processed, KEYS[5] = the parent row; other-queue child: KEYS[3] = p
-- flow:outbox. ARGV[1] = id, ARGV[2] = token, ARGV[3] = p, ARGV[4] = parent id, ARGV[5] = result,
-- ARGV[6] = 'xq' for the other-queue form, ARGV[7] = parent queue.
-- Reply: 1 completed, 0 gone. Error: EMQSTALE.
local att = redis.call('HGET', KEYS[2], 'attempts')
if not att then
  return 0
end
if att ~= ARGV[2] then
  return redis.error_reply('EMQSTALE complete token mismatch')
end
local p = ARGV[3]
local was_active = redis.call('ZREM', KEYS[1], ARGV[1])
if was_active == 0 then
  redis.call('ZREM', p .. 'pending', ARGV[1])
end
if ARGV[6] == 'xq' then
  if was_active == 1 then
    redis.call('RPUSH', KEYS[3], ARGV[7] .. '\0' .. ARGV[4] .. '\0' .. ARGV[1] .. '\0' .. ARGV[5])
  end
elseif KEYS[3] and was_active == 1 then
  local left = redis.call('DECR', KEYS[3])
  redis.call('HSET', KEYS[4], ARGV[1], ARGV[5])
  if left <= 0 then
    redis.call('ZADD', p .. 'pending', 0, ARGV[4])
    redis.call('HSET', KEYS[5], 'state', 'pending')
  end
end
redis.call('DEL', KEYS[2])
redis.call('HINCRBY', p .. 'metrics:completed', 'count', 1)
return 1

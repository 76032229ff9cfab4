-- EchoMQ's one-queue flow add (Flows.add, all children in the parent's queue): every child is
-- written ready with a `parent` field, the parent held with state awaiting_children and its
-- child count in :dependencies. The host then HSETs each child's parent_policy (not atomic).
-- KEYS[1] = the parent row, KEYS[2] = its :dependencies, KEYS[3] = p pending,
-- KEYS[4..] = the child rows; ARGV[1] = parent id, ARGV[2] = its payload, ARGV[3] = n, then
-- (child id, child payload) pairs. Reply: n. Error: EMQKIND (checked for every id first).
local n = tonumber(ARGV[3])
if string.sub(ARGV[1], 1, 3) ~= 'JOB' then
  return redis.error_reply('EMQKIND job id must be JOB-namespaced')
end
for i = 1, n do
  if string.sub(ARGV[2 + 2 * i], 1, 3) ~= 'JOB' then
    return redis.error_reply('EMQKIND job id must be JOB-namespaced')
  end
end
for i = 1, n do
  local id = ARGV[2 + 2 * i]
  redis.call('HSET', KEYS[3 + i], 'state', 'pending', 'attempts', '0', 'payload', ARGV[3 + 2 * i],
    'parent', ARGV[1])
  redis.call('ZADD', KEYS[3], 0, id)
end
redis.call('HSET', KEYS[1], 'state', 'awaiting_children', 'attempts', '0', 'payload', ARGV[2])
redis.call('SET', KEYS[2], n)
return n

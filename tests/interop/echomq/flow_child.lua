-- EchoMQ's write of one flow child on its own queue: ready, with `parent`, and `parent_queue`
-- when the parent lives in another queue (ARGV[4] not ''). The host HSETs parent_policy after.
-- KEYS[1] = the child row, KEYS[2] = the child queue's pending; ARGV[1] = id, ARGV[2] = payload,
-- ARGV[3] = parent id, ARGV[4] = parent queue or ''. Reply: 1. Error: EMQKIND.
if string.sub(ARGV[1], 1, 3) ~= 'JOB' then
  return redis.error_reply('EMQKIND job id must be JOB-namespaced')
end
redis.call('HSET', KEYS[1], 'state', 'pending', 'attempts', '0', 'payload', ARGV[2], 'parent',
  ARGV[3])
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'parent_queue', ARGV[4])
end
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1

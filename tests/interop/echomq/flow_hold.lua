-- EchoMQ's hold of a flow parent (its cross-queue and tree adds): the row in no set, state
-- awaiting_children, :dependencies = the child count. Overwrites whatever was there.
-- KEYS[1] = the parent row, KEYS[2] = its :dependencies; ARGV[1] = id, ARGV[2] = payload,
-- ARGV[3] = n. Reply: 1. Error: EMQKIND.
if string.sub(ARGV[1], 1, 3) ~= 'JOB' then
  return redis.error_reply('EMQKIND job id must be JOB-namespaced')
end
redis.call('HSET', KEYS[1], 'state', 'awaiting_children', 'attempts', '0', 'payload', ARGV[2])
redis.call('SET', KEYS[2], tonumber(ARGV[3]))
return 1

-- EchoMQ's remove_job: refuses while the :lock subkey or the row's `lock` field exists.
-- KEYS[1] = the job row, KEYS[2..5] = p pending, active, schedule, dead, KEYS[6] = p de:<did>;
-- ARGV[1] = id, ARGV[2] = did or "". Reply: 1 removed, -1 gone. Error: EMQLOCK.
local id = ARGV[1]
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if redis.call('EXISTS', KEYS[1] .. ':lock') == 1 or redis.call('HEXISTS', KEYS[1], 'lock') == 1 then
  return redis.error_reply('EMQLOCK job is locked')
end
for i = 2, 5 do
  redis.call('ZREM', KEYS[i], id)
end
if ARGV[2] ~= '' and redis.call('GET', KEYS[6]) == id then
  redis.call('DEL', KEYS[6])
end
redis.call('DEL', KEYS[1], KEYS[1] .. ':logs')
return 1

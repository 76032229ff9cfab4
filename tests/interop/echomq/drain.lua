-- EchoMQ's drain: DEL every row (and its :logs) of pending, and of schedule when its key is
-- passed, then DEL the set. active is untouched; :lock and de: keys stay (D9).
-- KEYS[1] = p, KEYS[2] = p pending, KEYS[3] = p schedule (optional). Reply: the total.
local total = 0
for i = 2, #KEYS do
  for _, id in ipairs(redis.call('ZRANGE', KEYS[i], 0, -1)) do
    redis.call('DEL', KEYS[1] .. 'job:' .. id, KEYS[1] .. 'job:' .. id .. ':logs')
    total = total + 1
  end
  redis.call('DEL', KEYS[i])
end
return total

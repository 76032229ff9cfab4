-- withdraw: take back a worker's hand-off offer when it stops (see claim.lua), and hand every job
-- handed to that offer, and still leased to it, back to pending at once, as release does.
--
-- KEYS[1] = emq:{q}:offers
-- KEYS[2] = emq:{q}:active
-- KEYS[3] = emq:{q}:pending
-- KEYS[4] = emq:{q}:wake
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = offer nonce
-- ARGV[3] = lease_ms the offer was made with (the member is "<offer nonce>:<lease_ms>")
--
-- Reply: the number of jobs handed back to pending. After this call nothing more can be handed to
-- the offer. A job on the hand-off list whose lock no longer carries the offer's nonce (the
-- reaper took it back; another worker holds it) is left alone. attempts is kept, as release keeps
-- it: it only ever climbs.
--- @include fence
local p, nonce = ARGV[1], ARGV[2]
redis.call('ZREM', KEYS[1], nonce .. ':' .. ARGV[3])
local box = p .. 'handoff:' .. nonce
local items = redis.call('LRANGE', box, 0, -1)
redis.call('DEL', box)
local released = 0
for _, item in ipairs(items) do
  local colon = string.find(item, ':', 1, true)
  local second = colon and string.find(item, ':', colon + 1, true)
  if second then
    local attempts, id = string.sub(item, 1, colon - 1), string.sub(item, colon + 1, second - 1)
    local row = p .. 'job:' .. id
    if redis.call('GET', row .. ':lock') == attempts .. ':' .. nonce
      and redis.call('HGET', row, 'state') == 'active'
      and redis.call('ZREM', KEYS[2], id) == 1
    then
      redis.call('ZADD', KEYS[3], 0, id)
      redis.call('HSET', row, 'state', 'pending')
      redis.call('DEL', row .. ':lock')
      released = released + 1
    end
  end
end
wake(KEYS[4], released)
return released

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
-- it: it only ever climbs; and as release does, attempts_base rises by one (never run, no
-- attempt of the retry budget spent).
--- @include fence
--- @include handoff
--- @include lanes
local p = ARGV[1]
local released = 0
for _, job in ipairs(withdraw_offer(p, KEYS[1], KEYS[2], ARGV[2], ARGV[3])) do
  local id, row = job[1], job[4]
  redis.call('ZREM', KEYS[2], id)
  local kept = redis.call('HMGET', row, 'group', 'priority') -- a hand-off is never grouped
  make_ready(p, KEYS[3], id, kept[1], kept[2], true)
  redis.call('HSET', row, 'state', 'pending')
  redis.call('HINCRBY', row, 'attempts_base', 1)
  redis.call('DEL', row .. ':lock')
  released = released + 1
end
wake(KEYS[4], released)
return released

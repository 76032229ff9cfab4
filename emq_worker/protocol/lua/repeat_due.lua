-- repeat_due: the repeatable jobs due now on the server clock, with their schedules, so that the
-- caller computes each one's following due time (cron needs a parser) and mints them with the
-- `repeat` script. Read-only; one call also gives the server time and the next due time, on the
-- queue's own node (a cluster's nodes may disagree on the time).
--
-- KEYS[1] = emq:{q}:repeat (ZSET: member = repeat name, score = next due ms; +inf while paused)
-- ARGV[1] = p, the queue prefix "emq:{q}:"; each repeat's spec is the HASH p.."repeat:"..name
-- ARGV[2] = batch: the most due repeats to return
--
-- Reply: {now_ms, next_in_ms, name1, due1, every_ms1, cron1, name2, ...}
--   now_ms      the server clock
--   next_in_ms  ms from now until the first repeat due later (-1: none, paused ones aside)
--   then one quadruple per due repeat (score <= now_ms), earliest first: its name, its due ms,
--   and its spec's every_ms and cron fields ('' when unset). A member whose spec has no payload
--   or no schedule is not ours (EchoMQ's own Repeat registry shares these key names) or was
--   damaged by hand: it is skipped, never touched.
--- @include now_ms
local p, batch = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local reply = {now, -1}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, batch)
for i = 1, #due, 2 do
  local spec = redis.call('HMGET', p .. 'repeat:' .. due[i], 'every_ms', 'cron', 'payload')
  if spec[3] and (spec[1] or spec[2]) then
    reply[#reply + 1] = due[i]
    reply[#reply + 1] = tonumber(due[i + 1])
    reply[#reply + 1] = spec[1] or ''
    reply[#reply + 1] = spec[2] or ''
  end
end
local later = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if #later > 0 and tonumber(later[2]) ~= math.huge then
  reply[2] = tonumber(later[2]) - now
end
return reply

-- promote: move due scheduled jobs to pending on the server clock.
--
-- KEYS[1] = emq:{q}:schedule
-- KEYS[2] = emq:{q}:pending
-- KEYS[3] = emq:{q}:wake
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = batch: the most jobs to promote in this call
-- ARGV[3] = a job id to promote now whatever its due time (an operator's "promote"), or absent
--           or "" for every due job; a job not in the schedule is left alone (promoted 0)
--
-- Reply: {promoted, phantoms, next_due_in_ms, more, outbox}
--   next_due_in_ms = ms from now until the earliest job still scheduled (-1 when none), so the
--                    caller can park until exactly then instead of a whole beat
--   more           = 1 when the batch was full
--   outbox         = LLEN p.."flow:outbox": flow entries waiting for the beat's sweep (so an
--                    empty outbox costs the beat nothing more)
-- A due member whose row is not scheduled (EchoMQ's delay after a reap left it in pending too,
-- and a worker claimed it there: D8) is only ZREMed: not counted, not moved.
-- A job goes to pending scored by its priority (the row's `priority`; 0 when absent), a grouped
-- one to its group's lane (includes/lanes.lua), which joins the ring when it can be served.
--- @include now_ms
--- @include fence
--- @include strays
--- @include lanes
local p, batch, only = ARGV[1], tonumber(ARGV[2]), ARGV[3] or ''
local now = now_ms()
local found = {}
if only == '' then
  found = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, batch)
elseif redis.call('ZSCORE', KEYS[1], only) then
  found = {only}
end
local due = in_state(p, KEYS[1], found, 'scheduled') -- strays are dropped, uncounted
local promoted, phantoms = 0, 0
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[1], id)
  local row = p .. 'job:' .. id
  -- One HMGET in place of EXISTS: attempts is on every row (EXISTS only for one without it).
  local kept = redis.call('HMGET', row, 'attempts', 'group', 'priority')
  if kept[1] or redis.call('EXISTS', row) == 1 then
    make_ready(p, KEYS[2], id, kept[2], kept[3], false)
    redis.call('HSET', row, 'state', 'pending')
    promoted = promoted + 1
  else
    phantoms = phantoms + 1
  end
end
wake(KEYS[3], promoted)
local next_due = -1
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #head > 0 then
  next_due = math.max(0, tonumber(head[2]) - now)
end
local more = 0
if only == '' and #found == batch then
  more = 1
end
return {promoted, phantoms, next_due, more, redis.call('LLEN', p .. 'flow:outbox')}

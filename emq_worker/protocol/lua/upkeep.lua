-- upkeep: the beat's look at one queue, on the server clock: reap the leases that have lapsed (as
-- lua/reap.lua does), report when the next lease lapses, the next scheduled job and the next repeat
-- fall due and how many jobs wait, and leave the fleet a note that nothing else is due. One call
-- stands for a reap, a promote, a repeat scan and a claim on a queue where nothing is due: an idle
-- queue costs the fleet one such check per window, not four script calls per worker per beat.
--
-- KEYS[1] = emq:{q}:active
-- KEYS[2] = emq:{q}:pending
-- KEYS[3] = emq:{q}:dead
-- KEYS[4] = emq:{q}:metrics:failed
-- KEYS[5] = emq:{q}:wake
-- KEYS[6] = emq:{q}:suspects (what reap.lua's header says of KEYS[1..6])
-- KEYS[7] = emq:{q}:schedule
-- KEYS[8] = emq:{q}:repeat
-- KEYS[9] = emq:{q}:upkeep (STRING: the server ms of the last check that found nothing due, or
--           'empty' when it found the queue empty (no TIME read), with PX until the first thing it
--           saw can fall due, at most ARGV[2]; set only here)
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = window_ms (> 0): the longest a check that found nothing due vouches for
-- ARGV[3] = '1': check even while KEYS[9] stands (a burst worker must see for itself); else ''
-- ARGV[4] = batch: the most leases to reap in this call
-- ARGV[5] = max_attempts: as reap.lua's
--
-- Reply: {'held', ms, leased}: a check found nothing due and vouches for ms more; leased is 1 while
--        any lease exists (KEYS[1]), 0 when none does: then no lease can lapse before one taken
--        from now on, and the worker may look again later than a beat after the note lapses.
--        {'due', reap_in, promote_in, repeat_in, pending, returned, dead_lettered, phantoms,
--        id1, outcome1, ...}: the leases reaped now (as reap.lua replies them), then the ms until
--        the earliest lease left lapses (0: the batch was full, more are due), until the earliest
--        scheduled job and the earliest repeat (paused ones, scored +inf, aside) fall due (0: due
--        now; -1: none; promote is due now too while p.."flow:outbox" holds entries, which the
--        sweep after a promote delivers), and ZCARD pending after the reap, plus 1 while a fair
--        lane is in rotation (p.."ring" not empty: jobs wait in their lanes).
-- When nothing is due now and pending is empty, KEYS[9] is SET to the server ms with PX the
-- smallest of window_ms and the positive due times: another worker's check before then answers
-- 'held'. A lease, a scheduled job or a repeat added since is covered: a lease lapses no sooner
-- than its own lease_ms (the worker keeps window_ms under a third of its lease), and our scripts
-- that make work ready or schedule it push a wake token (lua/includes/wake.lua), which a parked
-- worker acts on whatever this key says. A job another client puts in pending without a token
-- (EchoMQ's flat enqueue, D3) waits at most one window.
-- Events: 'reaped', as reap.lua's.
--- @include now_ms
--- @include reaping
local p, window, force = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
if not force then
  local held = redis.call('PTTL', KEYS[9])
  if held > 0 then
    return {'held', held, redis.call('EXISTS', KEYS[1])}
  end
end

-- A queue where no lease, scheduled job, repeat, outbox entry, pending job or lane in rotation
-- exists (Redis deletes an empty set or list) has nothing due and nothing to claim: one EXISTS
-- stands for the seven reads below and the clock, and an idle queue's check costs four commands,
-- not eleven.
if redis.call('EXISTS', KEYS[1], KEYS[7], KEYS[8], KEYS[2], p .. 'flow:outbox', p .. 'ring') == 0 then
  redis.call('SET', KEYS[9], 'empty', 'PX', window)
  return {'due', -1, -1, -1, 0, 0, 0, 0}
end
local now = now_ms()

-- ms from now until the score `head` names (0 if past), -1 when there is none.
local function due_in(head)
  if #head == 0 or tonumber(head[2]) == math.huge then
    return -1
  end
  return math.max(0, tonumber(head[2]) - now)
end

local reap_in = due_in(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES'))
local returned, dead, phantoms, reaped = 0, 0, 0, {}
if reap_in == 0 then
  local keys = {
    active = KEYS[1], pending = KEYS[2], dead = KEYS[3], failed = KEYS[4], wake = KEYS[5],
    suspects = KEYS[6],
  }
  local batch, max, more = tonumber(ARGV[4]), tonumber(ARGV[5]), nil
  returned, dead, phantoms, more, reaped = reap_due(p, keys, batch, max, now)
  if not more then
    reap_in = due_in(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES'))
  end
end
local promote_in = due_in(redis.call('ZRANGE', KEYS[7], 0, 0, 'WITHSCORES'))
-- A flow outbox with entries (children whose parents live in another queue) is swept after a
-- promote (whose reply counts it): it makes a promote due now.
if redis.call('LLEN', p .. 'flow:outbox') > 0 then
  promote_in = 0
end
local repeat_in = due_in(redis.call('ZRANGE', KEYS[8], 0, 0, 'WITHSCORES'))
-- Jobs waiting in fair lanes count as pending while a lane is in rotation (`ring`).
local pending = redis.call('ZCARD', KEYS[2]) + math.min(1, redis.call('LLEN', p .. 'ring'))
local quiet = window
for _, due in ipairs({reap_in, promote_in, repeat_in}) do
  if due == 0 then
    quiet = 0
  elseif due > 0 then
    quiet = math.min(quiet, due)
  end
end
if quiet > 0 and pending == 0 then
  redis.call('SET', KEYS[9], now, 'PX', quiet)
end
local reply = {'due', reap_in, promote_in, repeat_in, pending, returned, dead, phantoms}
for i = 1, #reaped do
  reply[8 + i] = reaped[i]
end
return reply

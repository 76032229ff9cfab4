-- claim: lease up to `count` ready jobs to one worker, oldest mint first.
--
-- KEYS[1] = emq:{q}:pending
-- KEYS[2] = emq:{q}:active
-- KEYS[3] = emq:{q}:meta
-- KEYS[4] = emq:{q}:dead
-- KEYS[5] = emq:{q}:limiter (the rate limit's counter: jobs leased in the current window)
-- KEYS[6] = emq:{q}:suspects (SET of ids reap.lua marked: see 'Suspects' below)
-- KEYS[7] = emq:{q}:offers (ZSET of hand-off offers: see 'offered' below; PX the longest offer)
-- KEYS[8] = emq:{q}:wake (DELeted by a claim that finds pending empty with ARGV[10] = '1')
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = lease_ms (> 0): the deadline is server TIME + lease_ms
-- ARGV[3] = count (>= 0): the most jobs to lease
-- ARGV[4] = nonce: random, unique per claim call; the lock subkey holds "<attempts>:<nonce>"
-- ARGV[5] = offer nonce: this worker's hand-off offer on this queue ('' when it makes none)
-- ARGV[6] = offer_ms (>= 0): when the claim empties pending, offer to take the next job enqueued
--           within this many ms (0: make no offer)
-- ARGV[7] = '1' when the worker's offer may still stand: withdraw it and take over first
--           whatever was handed to it ('0' otherwise)
-- ARGV[8] = room (>= 1): leave the offer only if at least this many slots of `count` are left
--           unleased (the worker keeps a slot for each of its other queues as well)
-- ARGV[9] = suspect room (>= 0; absent: 1): how many suspects this claim may lease beside the
--           rest; the worker sends 0 while it holds a suspect (see 'Suspects' below)
-- ARGV[10] = '1' when a wake token of this queue woke the worker (absent: ''): a claim that then
--           finds pending empty deletes the wake list. Its tokens announced jobs that are gone
--           (claimed by whoever came first) or a due time the woken worker now reads itself
--           (it promotes and scans repeats when it claims nothing); kept, each would wake a parked
--           worker for nothing, one at a time. A token pushed after this call is not touched.
-- ARGV[11] = memo_ms (absent: lease_ms): how long the memo (below) answers a re-sent claim, at
--           most lease_ms: the longest a re-send can come after the first sending
--
-- Reply: an array {status, phantoms, id1, payload1, attempts1, id2, ..., [suspect ids]}
--   status   = 'ok'; 'offered': ok, and an offer now stands (below); 'paused' when meta.paused
--              is set (nothing is taken from pending); or 'limited'
--   phantoms = pending members that could not become jobs: a member whose row is gone is
--              dropped; a row without a payload goes to dead with a last_error (EchoMQ's D7),
--              and so does one whose payload is over 16 MiB (its size is read, never the
--              payload), whose attempts is not an integer, or whose key is not a hash
-- A 'limited' reply is {'limited', phantoms, retry_after_ms, reason, id1, payload1, ...}: a limit
-- leaves no room for another job now (the jobs listed, maybe none, used the last of it):
--   reason 'concurrency': meta.concurrency > 0 and ZCARD active reached it (retry_after_ms = 0:
--                         when a slot frees, which the script cannot know), or
--   reason 'rate':        meta.max jobs are leased in this window of meta.duration ms
--                         (retry_after_ms = ms until the window ends).
-- Rate windows are aligned on the server clock: [k x duration, (k+1) x duration). The limiter
-- counts the window's leases and expires (PXAT) at the window's end; a counter whose expiry is
-- another window's end is stale and counts 0. Below the limits, count is cut to the room left;
-- when a cut count is leased in full, the reply is 'limited' so the caller holds back at once.
-- Neither limit is read when meta has neither field: the fast path costs one HMGET.
-- Suspects: a job the reaper returned to pending twice, or before its last attempt (its holders
-- died or froze while running it), may be what killed their process. Two suspects should not
-- share a process (the one that kills it would take the other down again), but no job may wait
-- for a worker to empty: a claim leases suspects beside ordinary jobs, at most `suspect room`
-- of them, and passes over the others (they stay in pending, in mint order) to lease the ordinary
-- jobs behind them. A suspect passed over that has waited in pending for half a lease or more
-- since its reap (the row's reaped_at, server clock; none recorded counts as waited) is leased
-- all the same: suspects never wait for one another longer than that. When any suspect is
-- leased, the reply ends with one more element, an array of the suspect ids it leased (a job
-- listed there is also listed as usual). Suspects are looked up only while SCARD suspects > 0:
-- one call otherwise; then the claim reads up to min(SCARD, 256) ids more than `count`, the
-- suspects it may pass over.
-- Events: 'claimed' per job leased, only while someone subscribes to p.."events".
-- Each claim adds 1 to attempts (the fencing token; written with state 'active' in one HSET when
-- it is a plain counter, else by HINCRBY, which refuses a value that is not an integer), sets
-- state 'active', scores the id in active at the deadline and sets the lock subkey with PX
-- 2 x lease_ms. The ids leased are kept
-- in emq:{q}:claim:<nonce> (PX memo_ms): a claim re-sent with the same nonce (the client retried
-- after a lost reply) returns the jobs the first one leased and still holds, without checking
-- pause again, instead of stranding them until the reaper; the jobs it returns that are still
-- suspects are listed again in the trailing array.
-- Hand-off offers: a claim that empties pending (no limit set, no suspect passed over, `room`
-- slots left) and is given offer_ms > 0 leaves the offer
-- "<offer nonce>:<lease_ms>" in KEYS[7], scored when it lapses (now + offer_ms), and replies
-- 'offered'. The worker then parks with its BLPOP on
-- p.."handoff:"..<offer nonce> as well as on the wake key: enqueue.lua leases the next job
-- straight to the newest live offer and pushes "<attempts>:<id>:<payload>" there (the offer is
-- used up), so the job starts without a claim round trip. The worker counts a standing offer as a
-- slot taken. Its next claim on the queue (ARGV[7] = '1') first withdraws the offer and takes
-- over any job handed to it that is still leased to it (state active, in active, lock
-- "<attempts>:<offer nonce>"): the lock is rewritten to "<attempts>:<nonce>", the deadline reset,
-- and the job replied first, before the jobs from pending (they count against `count`); a job the
-- reaper has taken back meanwhile is left alone. Lapsed offers are removed when one is made. At
-- most one live offer stands on a queue: a claim that finds another worker's leaves none (each
-- offer costs its worker a renewal every third of a lease; in a fleet parked on one queue, the
-- others are woken by their tokens, and the worker that takes a hand-off offers again after). Two
-- stood until an idle fleet's second renewal was found to be a sixth of all it asked.
-- Persistence: the ready jobs are read (ZRANGE), never popped, and leave pending last, by name
-- (ZREM), after every other write of theirs. The AOF and replicas get a script's effects, not the
-- script: ZPOPMIN would be recorded as itself and replayed against whatever pending holds at
-- replay time, where ZREM replays exactly the ids this claim took. A redis-server (7.0) that finds
-- its AOF torn inside a MULTI/EXEC block (SIGKILLed during the write) truncates it at the last
-- whole command, inside the block, and its next load applies that prefix with the transaction
-- written after it: a prefix of this claim's effects leaves every job it names in pending (or in
-- active too, where the reaper finds it), never in no set, and takes nothing it does not name.
--- @include now_ms
--- @include events
--- @include handoff
--- @include lease_row
--- @include lanes_claim
local p, lease, count, nonce = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local offer_nonce, offer_ms, withdraw = ARGV[5] or '', tonumber(ARGV[6]) or 0, ARGV[7] == '1'
local room = tonumber(ARGV[8]) or 1
local suspect_room = tonumber(ARGV[9]) or 1
local clear_wake = ARGV[10] == '1'
local memo_ms = math.min(lease, tonumber(ARGV[11]) or lease)
local offer = offer_nonce .. ':' .. lease
local memo = p .. 'claim:' .. nonce
local reply = {'ok', 0}
local leased_suspects = {}
-- The trailing array of suspects leased, when there is any (last, after any 'limited' fields).
local function with_suspects()
  if #leased_suspects > 0 then
    reply[#reply + 1] = leased_suspects
  end
  return reply
end
if redis.call('EXISTS', memo) == 1 then
  for _, id in ipairs(redis.call('LRANGE', memo, 0, -1)) do
    local row = p .. 'job:' .. id
    local fields = redis.call('HMGET', row, 'attempts', 'payload')
    if fields[1] and redis.call('GET', row .. ':lock') == fields[1] .. ':' .. nonce then
      reply[#reply + 1] = id
      reply[#reply + 1] = fields[2]
      reply[#reply + 1] = tonumber(fields[1])
      if redis.call('SISMEMBER', KEYS[6], id) == 1 then
        leased_suspects[#leased_suspects + 1] = id
      end
    end
  end
  if reply[1] == 'ok' and offer_nonce ~= '' and redis.call('ZSCORE', KEYS[7], offer) then
    reply[1] = 'offered'
  end
  return with_suspects()
end
-- Fail before the first write, never half-way (a script error after it would leave the jobs
-- written so far half-leased): a wrong-typed active or suspects set errors here with
-- WRONGTYPE, and out of memory refuses this no-op SETRANGE on the absent memo (a script is stopped
-- only at its first write that may grow memory, and only when nothing was written before it).
redis.call('ZCARD', KEYS[2])
local suspect_count = redis.call('SCARD', KEYS[6])
local suspects = suspect_count > 0
redis.call('SETRANGE', memo, 0, '')
local now, cut = nil, nil
local claimed = {}
-- The jobs handed to this worker's offer since its last claim, still leased to it: leased again
-- under this call's nonce and a fresh deadline, and replied first.
if withdraw then
  for _, job in ipairs(withdraw_offer(p, KEYS[7], KEYS[2], offer_nonce, lease)) do
    local id, attempts, payload, row = job[1], job[2], job[3], job[4]
    now = now or now_ms()
    redis.call('SET', row .. ':lock', attempts .. ':' .. nonce, 'PX', 2 * lease)
    redis.call('ZADD', KEYS[2], now + lease, id)
    claimed[#claimed + 1] = id
    reply[#reply + 1] = id
    reply[#reply + 1] = payload
    reply[#reply + 1] = tonumber(attempts)
  end
  count = math.max(0, count - #claimed)
end
local taken_over = #claimed
-- The ids leased are remembered for a re-sent call (the memo), once per 500 (unpack() has a stack
-- limit of a few thousand values).
local function remember()
  for first = 1, #claimed, 500 do
    redis.call('RPUSH', memo, unpack(claimed, first, math.min(first + 499, #claimed)))
  end
  if #claimed > 0 then
    redis.call('PEXPIRE', memo, memo_ms)
  end
end
-- A refusal after a take-over still replies the jobs taken over: {status, 0, [retry_after_ms,
-- reason,] jobs...}.
local function refuse(status, limit)
  remember()
  reply[1] = status
  if limit then
    table.insert(reply, 3, limit[2])
    table.insert(reply, 3, limit[1])
  end
  return reply
end
local meta = redis.call('HMGET', KEYS[3], 'paused', 'concurrency', 'max', 'duration')
if meta[1] then
  return refuse('paused')
end
local ceiling = tonumber(meta[2]) or 0
if ceiling > 0 then
  local room = ceiling - redis.call('ZCARD', KEYS[2])
  if room <= 0 then
    return refuse('limited', {0, 'concurrency'})
  end
  if room <= count then
    count, cut = room, {0, 'concurrency'}
  end
end
local rate_max, window = tonumber(meta[3]) or 0, tonumber(meta[4]) or 0
local window_end, used = nil, 0
if rate_max > 0 and window > 0 then
  now = now or now_ms()
  window_end = (math.floor(now / window) + 1) * window
  if redis.call('PEXPIRETIME', KEYS[5]) == window_end then
    used = tonumber(redis.call('GET', KEYS[5])) or 0
  end
  if used >= rate_max then
    return refuse('limited', {window_end - now, 'rate'})
  end
  if rate_max - used <= count then
    count, cut = rate_max - used, {window_end - now, 'rate'}
  end
end
-- Stand ready for the next job enqueued, once this claim has emptied pending and `leased` jobs
-- left room: an offer is made only where a hand-off may happen (no limit: enqueue.lua hands off
-- nothing then).
local function stand_ready(leased)
  if offer_ms > 0 and offer_nonce ~= '' and count - leased >= room and ceiling <= 0
    and rate_max <= 0
  then
    now = now or now_ms()
    redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now)
    -- This worker's own offer was withdrawn above (ARGV[7]): what is left is other workers'.
    if redis.call('ZCARD', KEYS[7]) >= 1 then
      return
    end
    redis.call('ZADD', KEYS[7], now + offer_ms, offer)
    -- The set outlives its newest offer by nothing: a key left behind (another client's
    -- obliterate deletes by the names it knows) expires by itself.
    if redis.call('PTTL', KEYS[7]) < offer_ms then
      redis.call('PEXPIRE', KEYS[7], offer_ms)
    end
    reply[1] = 'offered'
  end
end
-- Fair lanes (includes/lanes_claim.lua): grouped jobs take their turns first, only while the
-- ring holds a lane (one LLEN otherwise); the rest of count is the ungrouped jobs' share.
local lanes_leased, lanes_used = 0, 0
if count > 0 and redis.call('LLEN', p .. 'ring') > 0 then
  lanes_leased, lanes_used = claim_lanes(p, KEYS[1], count, nonce, lease, claimed, reply)
  count = count - lanes_used
end
local ready = {}
local extra = 0
if suspects then
  extra = math.min(suspect_count, 256)
end
if count > 0 then
  ready = redis.call('ZRANGE', KEYS[1], 0, count + extra - 1)
end
if #ready == 0 and lanes_used == 0 then
  if count > 0 then
    stand_ready(0)
    if clear_wake then
      redis.call('DEL', KEYS[8])
    end
  end
  remember()
  return reply
end
local emptied = #ready < count + extra
local left_waiting = false
-- A suspect passed over by a claim with no suspect room left: taken all the same once it has
-- waited half a lease since its reap (none recorded: its wait is unknown, so it counts as waited).
local function waited(id)
  now = now or now_ms()
  local reaped_at = tonumber(redis.call('HGET', p .. 'job:' .. id, 'reaped_at'))
  return reaped_at == nil or now - reaped_at >= lease / 2
end
local is_suspect = {}
if suspects then
  -- Lease ordinary jobs and up to suspect_room suspects (more once they have waited), in mint
  -- order, until `count` are taken; the suspects passed over stay in pending.
  local kept = {}
  for i = 1, #ready do
    if #kept == count then
      break
    end
    local id = ready[i]
    if redis.call('SISMEMBER', KEYS[6], id) == 0 then
      kept[#kept + 1] = id
    elseif suspect_room > 0 or waited(id) then
      suspect_room = suspect_room - 1
      is_suspect[id] = true
      kept[#kept + 1] = id
    else
      left_waiting = true
    end
  end
  ready = kept
end
now = now or now_ms()
local deadline = now + lease
for i = 1, #ready do
  local id = ready[i]
  local attempts, payload = lease_row(p, KEYS[4], id, nonce, lease)
  if attempts then
    claimed[#claimed + 1] = id
    reply[#reply + 1] = id
    reply[#reply + 1] = payload
    reply[#reply + 1] = attempts
    if is_suspect[id] then
      leased_suspects[#leased_suspects + 1] = id
    end
  else
    if suspects then
      redis.call('SREM', KEYS[6], id) -- dead or gone: no longer a suspect
    end
    reply[2] = reply[2] + 1
  end
end
-- One ZADD per 500 jobs rather than per job (unpack() has a stack limit of a few thousand values).
for first = taken_over + lanes_leased + 1, #claimed, 500 do -- lanes_claim scored its own
  local scored = {}
  for i = first, math.min(first + 499, #claimed) do
    scored[#scored + 1] = deadline
    scored[#scored + 1] = claimed[i]
  end
  redis.call('ZADD', KEYS[2], unpack(scored))
end
remember()
local leased = #claimed - taken_over
if leased > 0 then
  if window_end then
    if used == 0 then
      redis.call('SET', KEYS[5], leased, 'PXAT', window_end)
    else
      redis.call('INCRBY', KEYS[5], leased)
    end
  end
  if listening(p) then
    for i = 3 + 3 * taken_over, #reply, 3 do
      emit(p, 'claimed', reply[i], reply[i + 2], now)
    end
  end
end
-- Last of all, every job taken (leased, dead-lettered or dropped) leaves pending, by name.
for first = 1, #ready, 500 do
  redis.call('ZREM', KEYS[1], unpack(ready, first, math.min(first + 499, #ready)))
end
-- The limit bound this claim (it leased all the count it allowed): say so with the jobs.
if cut and #ready == count and reply[1] == 'ok' then
  table.insert(reply, 3, cut[2])
  table.insert(reply, 3, cut[1])
  reply[1] = 'limited'
elseif emptied and not left_waiting and #ready < count and reply[1] == 'ok' then
  stand_ready(leased)
end
return with_suspects()

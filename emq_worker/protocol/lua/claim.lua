-- claim: lease up to `count` ready jobs to one worker, oldest mint first.
--
-- KEYS[1] = emq:{q}:pending
-- KEYS[2] = emq:{q}:active
-- KEYS[3] = emq:{q}:meta
-- KEYS[4] = emq:{q}:dead
-- KEYS[5] = emq:{q}:limiter (the rate limit's counter: jobs leased in the current window)
-- KEYS[6] = emq:{q}:suspects (SET of ids reap.lua marked: see 'solo' below)
-- KEYS[7] = emq:{q}:offers (ZSET of hand-off offers: see 'offered' below)
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
--
-- Reply: a flat array {status, phantoms, id1, payload1, attempts1, id2, ...}
--   status   = 'ok'; 'offered': ok, and an offer now stands (below); 'paused' when meta.paused
--              is set (nothing is taken from pending); 'limited'; or 'solo': the one job listed
--              is a suspect and must run alone (below)
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
-- died or froze while running it), may be what killed their process. A claim leases at most one
-- suspect, and only alone: when the first ready job is a suspect it is leased by itself, with
-- status 'solo' (the worker runs nothing else beside it); when a later ready job is, the claim
-- stops before it. The ready jobs not leased stay in pending as they are (mint order is kept),
-- with one wake token each on p.."wake" (this worker may not take them now; another may). A
-- 'solo' reply never says 'limited' (the worker claims nothing while the suspect runs; its next
-- claim learns any limit afresh). Suspects are looked up only while SCARD suspects > 0: one call
-- otherwise.
-- Events: 'claimed' per job leased, only while someone subscribes to p.."events".
-- Each claim runs HINCRBY attempts 1 (the fencing token), sets state 'active', scores the id in
-- active at the deadline and sets the lock subkey with PX 2 x lease_ms. The ids leased are kept
-- in emq:{q}:claim:<nonce> (PX lease_ms): a claim re-sent with the same nonce (the client retried
-- after a lost reply) returns the jobs the first one leased and still holds, without checking
-- pause again, instead of stranding them until the reaper; a job it returns that is still a
-- suspect was leased alone, so the reply is 'solo' again.
-- Hand-off offers: a claim that empties pending (no limit set, nothing left waiting past a
-- suspect, not 'solo', `room` slots left) and is given offer_ms > 0 leaves the offer
-- "<offer nonce>:<lease_ms>" in KEYS[7], scored when it lapses (now + offer_ms), and replies
-- 'offered'. The worker then parks with its BLPOP on
-- p.."handoff:"..<offer nonce> as well as on the wake key: enqueue.lua leases the next job
-- straight to the newest live offer and pushes "<attempts>:<id>:<payload>" there (the offer is
-- used up), so the job starts without a claim round trip. The worker counts a standing offer as a
-- slot taken. Its next claim on the queue (ARGV[7] = '1') first withdraws the offer and takes
-- over any job handed to it that is still leased to it (state active, in active, lock
-- "<attempts>:<offer nonce>"): the lock is rewritten to "<attempts>:<nonce>", the deadline reset,
-- and the job replied first, before the jobs from pending (they count against `count`); a job the
-- reaper has taken back meanwhile is left alone. Lapsed offers are removed when one is made.
-- Persistence: the ready jobs are read (ZRANGE), never popped, and leave pending last, by name
-- (ZREM), after every other write of theirs. The AOF and replicas get a script's effects, not the
-- script: ZPOPMIN would be recorded as itself and replayed against whatever pending holds at
-- replay time, where ZREM replays exactly the ids this claim took. A redis-server (7.0) that finds
-- its AOF torn inside a MULTI/EXEC block (SIGKILLed during the write) truncates it at the last
-- whole command, inside the block, and its next load applies that prefix with the transaction
-- written after it: a prefix of this claim's effects leaves every job it names in pending (or in
-- active too, where the reaper finds it), never in no set, and takes nothing it does not name.
--- @include now_ms
--- @include wake
--- @include events
--- @include handoff
local p, lease, count, nonce = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local offer_nonce, offer_ms, withdraw = ARGV[5] or '', tonumber(ARGV[6]) or 0, ARGV[7] == '1'
local room = tonumber(ARGV[8]) or 1
local offer = offer_nonce .. ':' .. lease
local memo = p .. 'claim:' .. nonce
local MAX_PAYLOAD_BYTES = 16777216 -- emq_worker.payload_limits.MAX_PAYLOAD_BYTES (16 MiB)
local reply = {'ok', 0}
if redis.call('EXISTS', memo) == 1 then
  for _, id in ipairs(redis.call('LRANGE', memo, 0, -1)) do
    local row = p .. 'job:' .. id
    local fields = redis.call('HMGET', row, 'attempts', 'payload')
    if fields[1] and redis.call('GET', row .. ':lock') == fields[1] .. ':' .. nonce then
      reply[#reply + 1] = id
      reply[#reply + 1] = fields[2]
      reply[#reply + 1] = tonumber(fields[1])
      if redis.call('SISMEMBER', KEYS[6], id) == 1 then
        reply[1] = 'solo'
      end
    end
  end
  if reply[1] == 'ok' and offer_nonce ~= '' and redis.call('ZSCORE', KEYS[7], offer) then
    reply[1] = 'offered'
  end
  return reply
end
-- Fail before the first write, never half-way (a script error after it would leave the jobs
-- written so far half-leased): a wrong-typed active or suspects set errors here with
-- WRONGTYPE, and out of memory refuses this no-op SETRANGE on the absent memo (a script is stopped
-- only at its first write that may grow memory, and only when nothing was written before it).
redis.call('ZCARD', KEYS[2])
local suspects = redis.call('SCARD', KEYS[6]) > 0
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
    redis.call('PEXPIRE', memo, lease)
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
    redis.call('ZADD', KEYS[7], now + offer_ms, offer)
    reply[1] = 'offered'
  end
end
local ready = {}
if count > 0 then
  ready = redis.call('ZRANGE', KEYS[1], 0, count - 1)
end
if #ready == 0 then
  if count > 0 then
    stand_ready(0)
  end
  remember()
  return reply
end
local emptied = #ready < count
local left_waiting = false
-- Wake tokens for the ready jobs left in pending, best effort (pcall: a wrong-typed wake key must
-- not fail the call half-way), as many as jobs and at most 64, as the other scripts push them.
local function announce(n)
  if n > 0 then
    redis.pcall('LPUSH', p .. 'wake', unpack(wake_tokens(n)))
    redis.pcall('LTRIM', p .. 'wake', 0, WAKE_TOKENS_KEPT - 1)
  end
end
if suspects then
  -- Take the jobs before the first suspect, or the suspect alone when it comes first; the rest
  -- stay in pending.
  for i = 1, #ready do
    if redis.call('SISMEMBER', KEYS[6], ready[i]) == 1 then
      local keep = i - 1
      if i == 1 and taken_over == 0 then -- (beside a job taken over, it waits for the next claim)
        keep = 1
        reply[1] = 'solo'
      end
      announce(#ready - keep)
      left_waiting = true
      for j = #ready, keep + 1, -1 do
        ready[j] = nil
      end
      break
    end
  end
end
now = now or now_ms()
local deadline = now + lease
for i = 1, #ready do
  local id = ready[i]
  local row = p .. 'job:' .. id
  -- A row that cannot become a job goes to dead with its reason, read without raising: a key
  -- that is not a hash, no payload, a payload over MAX_PAYLOAD_BYTES (never read), or an
  -- attempts field that is not an integer.
  local size = redis.pcall('HSTRLEN', row, 'payload')
  local payload, attempts = nil, nil
  if type(size) == 'number' and size <= MAX_PAYLOAD_BYTES then
    payload = redis.call('HGET', row, 'payload')
  end
  if payload then
    attempts = redis.pcall('HINCRBY', row, 'attempts', 1)
  end
  if type(attempts) ~= 'number' and suspects then
    redis.call('SREM', KEYS[6], id) -- dead or gone: no longer a suspect
  end
  if type(attempts) ~= 'number' and redis.call('EXISTS', row) == 1 then
    redis.call('ZADD', KEYS[4], 0, id)
    if type(size) == 'number' then
      local reason = 'row has no payload'
      if size > MAX_PAYLOAD_BYTES then
        reason = 'payload is ' .. size .. ' bytes, over the limit of ' .. MAX_PAYLOAD_BYTES
      elseif payload then
        reason = 'attempts is not an integer: ' .. tostring(redis.call('HGET', row, 'attempts'))
      end
      redis.call('HSET', row, 'state', 'dead', 'last_error', reason)
    end
    reply[2] = reply[2] + 1
  elseif payload then
    redis.call('HSET', row, 'state', 'active')
    redis.call('SET', row .. ':lock', attempts .. ':' .. nonce, 'PX', 2 * lease)
    claimed[#claimed + 1] = id
    reply[#reply + 1] = id
    reply[#reply + 1] = payload
    reply[#reply + 1] = attempts
  else
    reply[2] = reply[2] + 1
  end
end
-- One ZADD per 500 jobs rather than per job (unpack() has a stack limit of a few thousand values).
for first = taken_over + 1, #claimed, 500 do
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
if reply[1] == 'solo' and leased == 0 then
  reply[1] = 'ok' -- the suspect was a phantom: nothing runs alone
end
-- The limit bound this claim (it leased all the count it allowed): say so with the jobs.
if cut and #ready == count and reply[1] == 'ok' then
  table.insert(reply, 3, cut[2])
  table.insert(reply, 3, cut[1])
  reply[1] = 'limited'
elseif emptied and not left_waiting and reply[1] == 'ok' then
  stand_ready(leased)
end
return reply

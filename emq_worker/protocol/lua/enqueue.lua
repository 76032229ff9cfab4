-- enqueue: add jobs to a queue, now (pending) or later (schedule). Every id is checked before
-- anything is written, so a bad id writes nothing; the caller sends only modes now/in/at with
-- integer ms.
--
-- KEYS[1] = emq:{q}:pending
-- KEYS[2] = emq:{q}:schedule
-- KEYS[3] = emq:{q}:wake
-- KEYS[4] = emq:{q}:offers (ZSET: workers parked with a free slot; see claim.lua)
-- KEYS[5] = emq:{q}:active
-- KEYS[6] = emq:{q}:meta
-- ARGV[1] = p, the queue prefix "emq:{q}:" (rows are p.."job:"..id, on the same slot)
-- ARGV[2] = nonce, fresh for each call (a client re-sending the call sends it again)
-- ARGV[3] = memo_ms: when the call enqueues anything, p.."enqueue:"..nonce keeps its reply this
--           long (0: no memo). A call that finds its memo is a re-send whose first reply was
--           lost: it replies the memo again and writes nothing, however the jobs fared since.
-- ARGV[4] = d, the number of dedup triples that follow (0 on the common path)
-- ARGV[5] = c, the number of chosen-id indices that follow the triples (0 on the common path)
-- ARGV[6] = o, the number of lane triples that follow the chosen indices (0 on the common path)
-- ARGV[6..] = d triples: job index (1-based, in the job list below), did, ttl_ms (0: none
--             given). The job is enqueued only if p.."de:"..did is free: absent, or naming a job
--             whose row is gone and which did not complete within the window (no
--             p.."idem:"..<that id> = "completed"): another client deleted it. Then de:<did> = id
--             PX ttl_ms, or, with none given, PX DEDUP_HOLD_MS past the job's due time: the key
--             names the job while it lives and still expires by itself when another client
--             deletes the queue by known names. The row gets a `dedup` field = did, so
--             completion and remove can find the key.
-- then    = c job indices (1-based) whose id the caller chose: such a job is a duplicate also
--           while p.."idem:"..id is "completed" (settle's completion tombstone, PX the worker's
--           completed_ttl_ms); enqueued, it sets idem:<id> = "live" PX DEDUP_HOLD_MS past its
--           due time, so its completion leaves that tombstone. The row itself keeps its three
--           fields (EchoMQ's conformance requires them).
-- then    = o triples: job index (1-based), group ('' for none), priority (an integer; 0 for
--           none). A group's job waits in its lane p.."g:"..group..":pending" (includes/lanes.lua)
--           instead of pending, the lane joining the ring when it can be served, and is never
--           handed off; a priority is its score there or in pending (lower claims first). The row
--           gets `group` and/or `priority` (EchoMQ's grouped row has `group`); a job with neither
--           keeps its three fields.
-- then    = one quadruple per job: id, payload, mode ("now" | "in" | "at"), ms
--             ("in": ms from now on the server clock; "at": absolute unix ms; "now": ignored)
--
-- Reply: an array with one entry per job, in order: 1 enqueued; 0 duplicate (the row exists, or
--        the caller-chosen id completed within the window; nothing is touched); or a string,
--        the id of the job that de:<did> names, live or completed within the window (a dedup
--        duplicate: nothing was written). A re-send gets the first copy's reply again.
-- Errors: EMQKIND when any id is not JOB-namespaced; checked for every job before any write.
-- Hand-off: while pending is empty and live offers stand in KEYS[4] (member "<nonce>:<lease_ms>",
-- score = when the offer lapses, server ms), each job enqueued "now" is leased here, oldest mint
-- first, to the newest offer, exactly as that worker's claim would lease it: attempts 1, state
-- active, the deadline now + lease_ms in active, the lock "1:<nonce>" PX 2 x lease_ms (and a
-- 'claimed' event while someone listens). Its offer is used up, and "1:<id>:<payload>" is pushed
-- onto p.."handoff:"..nonce (PX lease_ms), the list that worker's BLPOP is parked on, in place of
-- a wake token: the job starts without a claim round trip. Never while the queue is paused or has
-- a concurrency or rate limit (only the claim enforces those), and never ahead of a job already
-- waiting in pending. A job handed to a worker that died meanwhile is an expired lease like any
-- other: the reaper returns it.
--- @include now_ms
--- @include fence
--- @include events
--- @include lanes
-- How long a dedup key given no TTL, and a chosen id's live marker, outlive the job's due time
-- (30 days): far beyond a job's life in a served queue, and the bound on a key that another
-- client's obliterate (which deletes by known names) leaves behind.
local DEDUP_HOLD_MS = 30 * 24 * 3600 * 1000
local p, memo_ms = ARGV[1], tonumber(ARGV[3])
local memo = p .. 'enqueue:' .. ARGV[2]
-- A re-send: the first copy's reply, entry by entry ("1", "0" or a holder's id).
if memo_ms > 0 then
  local sent = redis.call('GET', memo)
  if sent then
    local again = {}
    for entry in string.gmatch(sent, '[^,]+') do
      again[#again + 1] = tonumber(entry) or entry
    end
    return again
  end
end
local dedup_from = 7
local chosen_from = dedup_from + 3 * tonumber(ARGV[4])
local lanes_from = chosen_from + tonumber(ARGV[5])
local jobs_from = lanes_from + 3 * tonumber(ARGV[6])
local now_jobs = 0 -- jobs enqueued "now": each may take an offer
for i = jobs_from, #ARGV, 4 do
  if string.sub(ARGV[i], 1, 3) ~= 'JOB' then
    return redis.error_reply('EMQKIND job id must be JOB-namespaced: ' .. ARGV[i])
  end
  if ARGV[i + 2] == 'now' then
    now_jobs = now_jobs + 1
  end
end
local dedup, chosen = {}, {}
for i = dedup_from, chosen_from - 1, 3 do
  dedup[tonumber(ARGV[i])] = i
end
for i = chosen_from, lanes_from - 1 do
  chosen[tonumber(ARGV[i])] = true
end
local placed = {} -- job index -> {group or false, priority}
for i = lanes_from, jobs_from - 1, 3 do
  placed[tonumber(ARGV[i])] = {ARGV[i + 1] ~= '' and ARGV[i + 1], tonumber(ARGV[i + 2]) or 0}
end
-- True when the caller-chosen id `id` completed within the window (settle's tombstone).
local function completed(id)
  return redis.call('GET', p .. 'idem:' .. id) == 'completed'
end
-- The id de:<did> names, when that job still exists or completed within the window; else nil
-- (the key is free to take: its job was deleted by another client).
local function parked(did)
  local holder = redis.call('GET', p .. 'de:' .. did)
  if holder and (redis.call('EXISTS', p .. 'job:' .. holder) == 1 or completed(holder)) then
    return holder
  end
  return nil
end
-- The row's fields: the three every job has, then the dedup id that completion and remove read,
-- the group and the priority (only for a job that has them).
local function row_fields(state, attempts, payload, did, place)
  local fields = {'state', state, 'attempts', attempts, 'payload', payload}
  if did then
    fields[#fields + 1], fields[#fields + 2] = 'dedup', did
  end
  if place and place[1] then
    fields[#fields + 1], fields[#fields + 2] = 'group', place[1]
  end
  if place and place[2] ~= 0 then
    fields[#fields + 1], fields[#fields + 2] = 'priority', place[2]
  end
  return fields
end
local replies, ready, enqueued, laned = {}, {}, 0, 0
local now = nil
local scheduled = 0
-- The live offers, newest first, at most one per job enqueued now (none when nothing waits for
-- one, or when the queue is paused, limited, or has jobs waiting already).
local offers, listen = {}, false
local function take_offers()
  if now_jobs == 0 or redis.call('ZCARD', KEYS[4]) == 0 or redis.call('ZCARD', KEYS[1]) > 0 then
    return
  end
  local meta = redis.call('HMGET', KEYS[6], 'paused', 'concurrency', 'max')
  if meta[1] or (tonumber(meta[2]) or 0) > 0 or (tonumber(meta[3]) or 0) > 0 then
    return
  end
  now = now or now_ms()
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  offers = redis.call('ZRANGE', KEYS[4], '+inf', '(' .. now, 'BYSCORE', 'REV', 'LIMIT', 0, now_jobs)
  listen = #offers > 0 and listening(p)
end
take_offers()
local handed = 0
-- Lease the new job `id` to the next offer, if one is left; false when none is.
local function hand_off(id, payload, did, place)
  while handed < #offers do
    handed = handed + 1
    local offer = offers[handed]
    redis.call('ZREM', KEYS[4], offer)
    local nonce, lease = string.match(offer, '^(%x+):(%d+)$')
    if nonce and not string.find(id, ':', 1, true) then
      lease = tonumber(lease)
      local row = p .. 'job:' .. id
      redis.call('HSET', row, unpack(row_fields('active', '1', payload, did, place)))
      redis.call('SET', row .. ':lock', '1:' .. nonce, 'PX', 2 * lease)
      redis.call('ZADD', KEYS[5], now + lease, id)
      local box = p .. 'handoff:' .. nonce
      redis.call('RPUSH', box, '1:' .. id .. ':' .. payload)
      redis.call('PEXPIRE', box, lease)
      if listen then
        emit(p, 'claimed', id, 1, now)
      end
      return true
    end
  end
  return false
end
for i = jobs_from, #ARGV, 4 do
  local id, payload, mode = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local row = p .. 'job:' .. id
  local index = (i - jobs_from) / 4 + 1
  local d = dedup[index]
  if redis.call('EXISTS', row) == 1 or (chosen[index] and completed(id)) then
    replies[#replies + 1] = 0
  else
    local did = d and ARGV[d + 1]
    local holder = did and parked(did)
    if holder then
      replies[#replies + 1] = holder
    else
      local state = (mode == 'now') and 'pending' or 'scheduled'
      local at = nil
      if mode ~= 'now' then
        at = tonumber(ARGV[i + 3])
        if mode == 'in' then
          now = now or now_ms()
          at = now + at
        end
      end
      local hold = nil
      if did or chosen[index] then
        now = now or now_ms()
        hold = DEDUP_HOLD_MS + math.max(0, (at or now) - now)
      end
      if did then
        local ttl = tonumber(ARGV[d + 2])
        redis.call('SET', p .. 'de:' .. did, id, 'PX', ttl > 0 and ttl or hold)
      end
      if chosen[index] then
        redis.call('SET', p .. 'idem:' .. id, 'live', 'PX', hold)
      end
      -- A job leased to a parked worker has its row written already: no pending entry, no wake.
      -- A grouped job is never handed off: it waits its lane's turn.
      local place = placed[index]
      local group = place and place[1]
      if not (mode == 'now' and not group and hand_off(id, payload, did, place)) then
        redis.call('HSET', row, unpack(row_fields(state, '0', payload, did, place)))
        if mode == 'now' and group then
          laned = laned + lane_ready(p, group, id, place[2])
        elseif mode == 'now' then
          ready[#ready + 1] = place and place[2] or 0
          ready[#ready + 1] = id
        else
          redis.call('ZADD', KEYS[2], at, id)
          scheduled = scheduled + 1
        end
      end
      replies[#replies + 1] = 1
      enqueued = enqueued + 1
    end
  end
end
-- One ZADD per 500 ready jobs rather than one per job (unpack() has a stack limit).
for first = 1, #ready, 1000 do
  redis.call('ZADD', KEYS[1], unpack(ready, first, math.min(first + 999, #ready)))
end
-- Ready jobs wake one parked worker each; scheduled ones wake one worker in all, which then
-- learns the new earliest due time (and parks until exactly then rather than a whole beat).
wake(KEYS[3], #ready / 2 + laned + math.min(scheduled, 1))
-- The memo, only when this call wrote something: a re-send of a call that wrote nothing is a
-- fresh call, and answers as the first did (or enqueues what has since become free).
if memo_ms > 0 and enqueued > 0 then
  redis.call('SET', memo, table.concat(replies, ','), 'PX', memo_ms)
end
return replies

-- settle: write the outcomes of finished jobs (complete or fail), each fenced on its own, in one
-- call: a worker flushes every outcome that is ready in one round trip.
--
-- KEYS[1] = emq:{q}:metrics:completed
-- KEYS[2] = emq:{q}:schedule
-- KEYS[3] = emq:{q}:dead
-- KEYS[4] = emq:{q}:metrics:failed
-- KEYS[5] = emq:{q}:wake
-- KEYS[6] = emq:{q}:cancel (a settled job's cancel request, if any, is answered and removed)
-- KEYS[7] = emq:{q}:suspects (a settled job is no longer a suspect: its handler returned; while
--           other suspects remain, one wake token per suspect settled, so a worker that may now
--           take one claims without waiting for its beat)
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = receipt_ms: how long each holder's receipt answers a re-sent settle (the receipts'
--           hash, p.."receipts:"..<id but its last character>, lives this long after its last
--           write: lua/includes/receipts.lua)
-- ARGV[3] = completed_ttl_ms: the completion window. A completed job enqueued with a chosen id
--           (p.."idem:"..id = "live" exists) or a dedup id (its `dedup` field, while de:<dedup>
--           names it) gets the tombstone idem:<id> = "completed" PX completed_ttl_ms; de:<dedup>
--           keeps naming the job, PEXPIREd to completed_ttl_ms (unless its own TTL ends sooner):
--           enqueue reports both as duplicates until then. 0: no tombstone; both keys are
--           deleted.
-- ARGV[4] = n, the number of completions that follow
-- ARGV[5] = r, how many of those n store a result (they come first; 0 on the common path)
-- ARGV[6..] = r quintuples, id, token, nonce, result_ttl_ms, result, then n - r triples, id,
--             token, nonce: one per completed job. The row, its lock and logs subkeys are
--             deleted (and tombstoned, above); metrics:completed counts them. A result is SET
--             at p.."result:"..id with PX result_ttl_ms, and p.."result:"..id..":ready" gets
--             one "1" with the same TTL (waiters block on it); result_ttl_ms 0 stores none
--             (the result only goes to the job's flow parent).
-- then    = one septuple per failed job: id, token, nonce, delay_ms, max_attempts, error,
--           trace. It is retried after delay_ms into schedule (0: straight back to pending, with
--           a wake), or moved to dead once attempts - attempts_base >= max_attempts (0
--           dead-letters at once: an unknown task or an undecodable payload); last_error is set
--           and metrics:failed counts a dead job. attempts is the fencing token: only a claim
--           moves it, and a move to dead (+1, attempts_base +1 too: no attempt spent), so no
--           other holder of the token can settle the dead job. The failure record (row
--           fields EchoMQ ignores): last_traceback = trace (bounded by the worker; '' deletes an
--           older one),
--           error_history = a JSON array of the last 5 {attempt, at_ms, error} (error cut to 1 KB).
--           A dead job also gets a 'dead' token RPUSHed to p.."result:"..id..":ready" (PX
--           receipt_ms), which wakes a Producer.result waiter at once.
--
-- Reply: a flat array with two entries per job, completions first, then failures, each in the
-- order sent: status, detail
--   'ok', outcome        settled now; outcome is completed, scheduled, pending or dead
--   'settled', outcome   this holder already settled it (a re-sent command); nothing changed
--   'gone', ''           the row does not exist
--   'stale', current     another holder owns the job (its attempts, or its lock value)
--   'state', state       the token matches but the job is not held any more (scheduled, dead,
--                        or missing from the set its state names); nothing changed
-- Accepted while the job is active, or reaped back to pending and not yet re-claimed (late but
-- uncontested).
-- Flows (includes/flows.lua): a completed flow child counts in its parent (its result, else its
-- id, in the parent's :processed), a dead one fails it or counts as done (its parent_policy);
-- a parent whose last child this was goes to pending (one wake), one in another queue hears of
-- it through p.."flow:outbox". A completed parent's flow subkeys are deleted.
-- Events, only while someone subscribes to p.."events": 'completed'; 'retried' (outcome pending
-- or scheduled; then 'failed' again, its old name, kept for subscribers) or 'dead', with the
-- error; 'fenced' for a stale, gone or state refusal.
--- @include now_ms
--- @include attempts
--- @include fence
--- @include events
--- @include flows
--- @include lanes
local p, receipt_ms, completed_ttl, n = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local reply, completed, woken, scheduled, cleared = {}, 0, 0, 0, 0
local now = nil
local receipt_hashes, receipt_hash_seen = {}, {}

local cancels = redis.call('SCARD', KEYS[6]) > 0
local suspects = redis.call('SCARD', KEYS[7]) > 0
local listeners = listening(p)

local function answer(row, id, token, nonce, outcome)
  if cancels then
    redis.call('SREM', KEYS[6], id)
  end
  if suspects then
    cleared = cleared + redis.call('SREM', KEYS[7], id)
  end
  local hash = receipts_key(p, id)
  redis.call('HSET', hash, receipt_field(id), token .. ':' .. nonce .. ':' .. outcome)
  if not receipt_hash_seen[hash] then
    receipt_hash_seen[hash] = true
    receipt_hashes[#receipt_hashes + 1] = hash
  end
  reply[#reply + 1] = 'ok'
  reply[#reply + 1] = outcome
end

local function refuse(refusal, id, token)
  reply[#reply + 1] = refusal[1]
  reply[#reply + 1] = refusal[2] or ''
  if listeners and refusal[1] ~= 'settled' then
    now = now or now_ms()
    emit(p, 'fenced', id, token, now, {outcome = refusal[1], current = refusal[2] or ''})
  end
end

-- Whether any completion of this call has an idem:<id> key (a caller-chosen id; a minted id, the
-- common case, has none): one EXISTS over all of them rather than a SET XX per job.
local function any_idem(from, to, step)
  local keys = {}
  for i = from, to, step do
    keys[#keys + 1] = p .. 'idem:' .. ARGV[i]
  end
  for first = 1, #keys, 500 do
    if redis.call('EXISTS', unpack(keys, first, math.min(first + 499, #keys))) > 0 then
      return true
    end
  end
  return false
end
local with_results = tonumber(ARGV[5])
local plain_from = 6 + 5 * with_results
local failures_from = plain_from + 3 * (n - with_results)
local idem_keys = any_idem(6, plain_from - 1, 5) or any_idem(plain_from, failures_from - 1, 3)

-- The completion tombstone of a job with a chosen id (its idem:<id> = "live" marker) or a dedup
-- id (`did` while de:<did> names it): a re-sent enqueue of either is a duplicate for the window.
-- idem:<id> says "completed" (for a dedup job too: enqueue tells a completed job from one another
-- client deleted), and de:<did> keeps naming the job for as long. SET XX turns a live marker
-- into the tombstone and writes nothing for a minted id.
local function tombstone(id, did)
  local idem = p .. 'idem:' .. id
  local de = did and p .. 'de:' .. did
  if de and redis.call('GET', de) ~= id then
    de = nil
  end
  if completed_ttl <= 0 then
    if idem_keys then
      redis.call('DEL', idem)
    end
    if de then
      redis.call('DEL', de)
    end
    return
  end
  if de then
    redis.call('SET', idem, 'completed', 'PX', completed_ttl)
  elseif idem_keys then
    redis.call('SET', idem, 'completed', 'XX', 'PX', completed_ttl)
  end
  if de then
    local left = redis.call('PTTL', de)
    if left < 0 or left > completed_ttl then
      redis.call('PEXPIRE', de, completed_ttl)
    end
  end
end

local function complete(id, token, nonce, value)
  local row, refusal, did, group, left_active, link = settle_admit(p, id, token, nonce)
  if refusal then
    refuse(refusal, id, token)
    return false
  end
  if group then
    woken = woken + lane_settled(p, group, left_active)
  end
  tombstone(id, did)
  woken = woken + flow_completed(p, row, id, value, link)
  -- The row, its subkeys and a flow parent's (flow_retire's four) in one DEL.
  redis.call('DEL', row, row .. ':lock', row .. ':logs', row .. ':dependencies',
    row .. ':processed', row .. ':failed', row .. ':unsuccessful')
  completed = completed + 1
  answer(row, id, token, nonce, 'completed')
  if listeners then
    now = now or now_ms()
    emit(p, 'completed', id, token, now)
  end
  return true
end

local HISTORY_KEPT, HISTORY_ERROR_BYTES = 5, 1024

local function record_failure(row, token, err, trace)
  if trace ~= '' then
    redis.call('HSET', row, 'last_traceback', trace)
  else
    redis.call('HDEL', row, 'last_traceback')
  end
  -- A field that does not decode (written by someone else) is started afresh, never an error:
  -- the settle must not fail over a diagnostic.
  local ok, history = pcall(cjson.decode, redis.call('HGET', row, 'error_history') or '[]')
  if not ok or type(history) ~= 'table' then
    history = {}
  end
  now = now or now_ms()
  history[#history + 1] =
    {attempt = tonumber(token), at_ms = now, error = string.sub(err, 1, HISTORY_ERROR_BYTES)}
  while #history > HISTORY_KEPT do
    table.remove(history, 1)
  end
  redis.call('HSET', row, 'error_history', cjson.encode(history))
end

for i = 6, plain_from - 1, 5 do
  local id = ARGV[i]
  if complete(id, ARGV[i + 1], ARGV[i + 2], ARGV[i + 4]) and ARGV[i + 3] ~= '0' then
    local key, ttl = p .. 'result:' .. id, ARGV[i + 3]
    redis.call('SET', key, ARGV[i + 4], 'PX', ttl)
    redis.call('DEL', key .. ':ready')
    redis.call('RPUSH', key .. ':ready', '1')
    redis.call('PEXPIRE', key .. ':ready', ttl)
  end
end
for i = plain_from, failures_from - 1, 3 do
  complete(ARGV[i], ARGV[i + 1], ARGV[i + 2])
end
for i = failures_from, #ARGV, 7 do
  local id, token, nonce = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local row, refusal, _, group, left_active = settle_admit(p, id, token, nonce)
  if refusal then
    refuse(refusal, id, token)
  else
    local delay, max = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
    local kept = redis.call('HMGET', row, 'attempts_base', 'priority')
    local base = tonumber(kept[1] or '0')
    local outcome
    if tonumber(token) - base >= max then
      outcome = 'dead'
      redis.call('ZADD', KEYS[3], 0, id)
      redis.call('HINCRBY', KEYS[4], 'count', 1)
      -- A result waiter blocks on the ready list: a 'dead' token wakes it now, not at its
      -- once-a-second look at the row.
      local ready = p .. 'result:' .. id .. ':ready'
      redis.call('RPUSH', ready, 'dead')
      redis.call('PEXPIRE', ready, receipt_ms)
      woken = woken + flow_failed(p, row, id, ARGV[i + 5])
    elseif delay <= 0 then
      outcome = 'pending' -- back to pending, or its group's lane, at its priority
      woken = woken + make_ready(p, p .. 'pending', id, group, kept[2], left_active)
      group = false
    else
      outcome = 'scheduled'
      now = now or now_ms()
      redis.call('ZADD', KEYS[2], now + delay, id)
      scheduled = 1
    end
    if group then -- dead or scheduled: out of its group's count (a lane may open)
      woken = woken + lane_settled(p, group, left_active)
    end
    redis.call('HSET', row, 'state', outcome, 'last_error', ARGV[i + 5])
    if outcome == 'dead' then
      fence_out_holder(row) -- no other client's late write may delete a dead row
    end
    record_failure(row, token, ARGV[i + 5], ARGV[i + 6])
    redis.call('DEL', row .. ':lock')
    answer(row, id, token, nonce, outcome)
    if listeners then
      now = now or now_ms()
      local facts = {outcome = outcome, error = ARGV[i + 5]}
      if outcome == 'dead' then
        emit(p, 'dead', id, token, now, facts)
      else
        emit(p, 'retried', id, token, now, facts)
        emit(p, 'failed', id, token, now, facts) -- the old name of 'retried', for subscribers
      end
    end
  end
end
if completed > 0 then
  redis.call('HINCRBY', KEYS[1], 'count', completed)
end
-- Each receipts hash written lives receipt_ms from now (one PEXPIRE per hash, not per job).
for _, hash in ipairs(receipt_hashes) do
  redis.call('PEXPIRE', hash, receipt_ms)
end
-- One wake per job back in pending, and one in all for retries scheduled later: a parked worker
-- learns their due time and parks until exactly then instead of a whole beat. One per suspect
-- settled while others remain: the worker that ran it may take the next one now.
if cleared > 0 and redis.call('SCARD', KEYS[7]) == 0 then
  cleared = 0
end
wake(KEYS[5], woken + scheduled + cleared)
return reply

-- enqueue: add jobs to a queue, now (pending) or later (schedule). Every id is checked before
-- anything is written, so a bad id writes nothing; the caller sends only modes now/in/at with
-- integer ms.
--
-- KEYS[1] = emq:{q}:pending
-- KEYS[2] = emq:{q}:schedule
-- KEYS[3] = emq:{q}:wake
-- ARGV[1] = p, the queue prefix "emq:{q}:" (rows are p.."job:"..id, on the same slot)
-- ARGV[2] = d, the number of dedup triples that follow (0 on the common path)
-- ARGV[3..] = d triples: job index (1-based, in the job list below), did, ttl_ms (0: no TTL).
--             The job is enqueued only if p.."de:"..did is free (absent, or naming a job whose
--             row is gone); then de:<did> = id (PX ttl_ms when > 0) and the row gets a `dedup`
--             field = did, so completion and remove can release the key.
-- then    = one quadruple per job: id, payload, mode ("now" | "in" | "at"), ms
--             ("in": ms from now on the server clock; "at": absolute unix ms; "now": ignored)
--
-- Reply: an array with one entry per job, in order: 1 enqueued; 0 duplicate (the row exists; the
--        original row is kept untouched); or a string, the id of the job that de:<did> names
--        (a dedup duplicate: nothing was written).
-- Errors: EMQKIND when any id is not JOB-namespaced; checked for every job before any write.
--- @include now_ms
--- @include fence
local p = ARGV[1]
local jobs_from = 3 + 3 * tonumber(ARGV[2])
for i = jobs_from, #ARGV, 4 do
  if string.sub(ARGV[i], 1, 3) ~= 'JOB' then
    return redis.error_reply('EMQKIND job id must be JOB-namespaced: ' .. ARGV[i])
  end
end
local dedup = {}
for i = 3, jobs_from - 1, 3 do
  dedup[tonumber(ARGV[i])] = i
end
-- The id de:<did> names, when that job still exists; else nil (the key is free to take).
local function parked(did)
  local holder = redis.call('GET', p .. 'de:' .. did)
  if holder and redis.call('EXISTS', p .. 'job:' .. holder) == 1 then
    return holder
  end
  return nil
end
local replies, ready = {}, {}
local now = nil
local scheduled = 0
for i = jobs_from, #ARGV, 4 do
  local id, payload, mode = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local row = p .. 'job:' .. id
  local d = dedup[(i - jobs_from) / 4 + 1]
  if redis.call('EXISTS', row) == 1 then
    replies[#replies + 1] = 0
  else
    local did = d and ARGV[d + 1]
    local holder = did and parked(did)
    if holder then
      replies[#replies + 1] = holder
    else
      local state = (mode == 'now') and 'pending' or 'scheduled'
      if did then
        local ttl = tonumber(ARGV[d + 2])
        if ttl > 0 then
          redis.call('SET', p .. 'de:' .. did, id, 'PX', ttl)
        else
          redis.call('SET', p .. 'de:' .. did, id)
        end
        redis.call('HSET', row, 'state', state, 'attempts', '0', 'payload', payload, 'dedup', did)
      else
        redis.call('HSET', row, 'state', state, 'attempts', '0', 'payload', payload)
      end
      if mode == 'now' then
        ready[#ready + 1] = 0
        ready[#ready + 1] = id
      else
        local at = tonumber(ARGV[i + 3])
        if mode == 'in' then
          now = now or now_ms()
          at = now + at
        end
        redis.call('ZADD', KEYS[2], at, id)
        scheduled = scheduled + 1
      end
      replies[#replies + 1] = 1
    end
  end
end
-- One ZADD per 500 ready jobs rather than one per job (unpack() has a stack limit).
for first = 1, #ready, 1000 do
  redis.call('ZADD', KEYS[1], unpack(ready, first, math.min(first + 999, #ready)))
end
-- Ready jobs wake one parked worker each; scheduled ones wake one worker in all, which then
-- learns the new earliest due time (and parks until exactly then rather than a whole beat).
wake(KEYS[3], #ready / 2 + math.min(scheduled, 1))
return replies

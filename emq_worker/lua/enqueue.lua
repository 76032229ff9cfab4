-- enqueue: add jobs to a queue, now (pending) or later (schedule). Every id is checked before
-- anything is written, so a bad id writes nothing; the caller sends only modes now/in/at with
-- integer ms.
--
-- KEYS[1] = emq:{q}:pending
-- KEYS[2] = emq:{q}:schedule
-- KEYS[3] = emq:{q}:wake
-- ARGV[1] = p, the queue prefix "emq:{q}:" (rows are p.."job:"..id, on the same slot)
-- ARGV[2..] = one quadruple per job: id, payload, mode ("now" | "in" | "at"), ms
--             ("in": ms from now on the server clock; "at": absolute unix ms; "now": ignored)
--
-- Reply: an array with one integer per job, in order: 1 enqueued, 0 duplicate (the row exists;
--        the original row is kept untouched).
-- Errors: EMQKIND when any id is not JOB-namespaced; checked for every job before any write.
--- @include now_ms
--- @include fence
local p = ARGV[1]
for i = 2, #ARGV, 4 do
  if string.sub(ARGV[i], 1, 3) ~= 'JOB' then
    return redis.error_reply('EMQKIND job id must be JOB-namespaced: ' .. ARGV[i])
  end
end
local replies, ready = {}, {}
local now = nil
local scheduled = 0
for i = 2, #ARGV, 4 do
  local id, payload, mode = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local row = p .. 'job:' .. id
  if redis.call('EXISTS', row) == 1 then
    replies[#replies + 1] = 0
  elseif mode == 'now' then
    redis.call('HSET', row, 'state', 'pending', 'attempts', '0', 'payload', payload)
    ready[#ready + 1] = 0
    ready[#ready + 1] = id
    replies[#replies + 1] = 1
  else
    local at = tonumber(ARGV[i + 3])
    if mode == 'in' then
      now = now or now_ms()
      at = now + at
    end
    redis.call('HSET', row, 'state', 'scheduled', 'attempts', '0', 'payload', payload)
    redis.call('ZADD', KEYS[2], at, id)
    scheduled = scheduled + 1
    replies[#replies + 1] = 1
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

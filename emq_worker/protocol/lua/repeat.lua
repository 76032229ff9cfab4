-- repeat: mint due occurrences of repeatable jobs and advance each schedule, in one step.
--
-- KEYS[1] = emq:{q}:repeat (ZSET: member = repeat name, score = next due ms on the server
--           clock; a paused repeat scores +inf)
-- KEYS[2] = emq:{q}:pending
-- KEYS[3] = emq:{q}:wake
-- ARGV[1] = p, the queue prefix "emq:{q}:"; each repeat's spec is the HASH p.."repeat:"..name
-- ARGV[2..] = one quadruple per occurrence: name, due_ms (the score the caller read), next_ms
--             (the due time after it, computed by the caller from the server clock), job_id
--
-- Reply: one status per occurrence, in order:
--   'minted'  the job was enqueued to pending (row state pending, attempts 0, the spec's
--             payload, field `repeat` = name) and the score moved from due_ms to next_ms
--   'moved'   the score is no longer due_ms: another worker minted this occurrence first, or the
--             repeat was paused, re-registered or removed; nothing changed (the compare-and-set
--             that makes two workers never mint one occurrence twice)
--   'gone'    the spec hash has no payload (removed meanwhile, or not ours): nothing changed
--   'taken'   a row with job_id already exists (an id collision): nothing changed; the caller
--             retries with a fresh id
-- Errors: EMQKIND when any job_id is not JOB-namespaced; checked before any write.
--- @include fence
local p = ARGV[1]
for i = 2, #ARGV, 4 do
  if string.sub(ARGV[i + 3], 1, 3) ~= 'JOB' then
    return redis.error_reply('EMQKIND job id must be JOB-namespaced: ' .. ARGV[i + 3])
  end
end
local reply, minted = {}, 0
for i = 2, #ARGV, 4 do
  local name, due, next_due, id = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local score = redis.call('ZSCORE', KEYS[1], name)
  local spec = p .. 'repeat:' .. name
  local row = p .. 'job:' .. id
  if not score or tonumber(score) ~= tonumber(due) then
    reply[#reply + 1] = 'moved'
  elseif redis.call('EXISTS', row) == 1 then
    reply[#reply + 1] = 'taken'
  else
    local payload = redis.call('HGET', spec, 'payload')
    if not payload then
      reply[#reply + 1] = 'gone'
    else
      redis.call('HSET', row, 'state', 'pending', 'attempts', '0', 'payload', payload,
        'repeat', name)
      redis.call('ZADD', KEYS[2], 0, id)
      redis.call('ZADD', KEYS[1], 'XX', next_due, name)
      redis.call('HSET', spec, 'last_job', id, 'last_due', due)
      redis.call('HINCRBY', spec, 'minted', 1)
      minted = minted + 1
      reply[#reply + 1] = 'minted'
    end
  end
end
wake(KEYS[3], minted)
return reply

-- joblog: the holder of a running job appends one line to the job's log list, keeping the last N;
-- fenced like a settle, so a stale holder cannot append. The list shares the row's fate: complete
-- and remove delete it; a dead job keeps it until removed.
--
-- KEYS[1] = emq:{q}:job:<id>:logs
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = job id
-- ARGV[3] = token (the attempts value of the holder's claim)
-- ARGV[4] = nonce (the holder's claim nonce)
-- ARGV[5] = keep: the list is trimmed to its last `keep` lines (>= 1)
-- ARGV[6] = the line
--
-- Reply: {status, detail}
--   'ok', length         appended (RPUSH, then LTRIM -keep -1); length = lines kept now
--   'gone', ''           the row does not exist
--   'stale', current     another holder owns the job (its attempts, or its lock value)
--   'state', state       the token matches but the job is not active any more (reaped)
--- @include fence
local p, id, token, nonce, keep = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local _, refusal = active_holder(p, id, token, nonce)
if refusal then
  return refusal
end
local length = redis.call('RPUSH', KEYS[1], ARGV[6])
if length > keep then
  redis.call('LTRIM', KEYS[1], -keep, -1)
  length = keep
end
return {'ok', length}

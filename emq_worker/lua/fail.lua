-- fail: settle a held job as failed: retry it later, at once, or move it to dead.
--
-- KEYS[1] = emq:{q}:schedule
-- KEYS[2] = emq:{q}:dead
-- KEYS[3] = emq:{q}:metrics:failed
-- KEYS[4] = emq:{q}:wake
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = job id
-- ARGV[3] = token (attempts at claim)
-- ARGV[4] = nonce of the claim
-- ARGV[5] = receipt_ms: how long the holder's receipt answers a re-sent settle
-- ARGV[6] = delay_ms before the retry (0: back to pending at once, with a wake)
-- ARGV[7] = max_attempts: at attempts - attempts_base >= max_attempts the job goes to dead
--           (0 dead-letters at once: an unknown task or an undecodable payload)
-- ARGV[8] = error text, stored as last_error
--
-- Reply: {'ok', 'scheduled' | 'pending' | 'dead'}, or, with nothing changed, {'settled', outcome},
--        {'gone'}, {'stale', current}, {'state', state} as for complete.
-- attempts is never changed here: it is the fencing token, and only a claim moves it.
--- @include now_ms
--- @include fence
local p, id, token, nonce = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local delay, max = tonumber(ARGV[6]), tonumber(ARGV[7])
local row, refusal = settle_admit(p, id, token, nonce)
if refusal then
  return refusal
end
local base = tonumber(redis.call('HGET', row, 'attempts_base') or '0')
local outcome
if tonumber(token) - base >= max then
  outcome = 'dead'
  redis.call('ZADD', KEYS[2], 0, id)
  redis.call('HINCRBY', KEYS[3], 'count', 1)
elseif delay <= 0 then
  outcome = 'pending'
  redis.call('ZADD', p .. 'pending', 0, id)
  wake(KEYS[4], 1)
else
  outcome = 'scheduled'
  redis.call('ZADD', KEYS[1], now_ms() + delay, id)
end
redis.call('HSET', row, 'state', outcome, 'last_error', ARGV[8])
redis.call('DEL', row .. ':lock')
redis.call('SET', row .. ':receipt', token .. ':' .. nonce .. ':' .. outcome, 'PX', ARGV[5])
return {'ok', outcome}

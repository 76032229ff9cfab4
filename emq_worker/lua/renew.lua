-- renew: extend every lease a worker holds on one queue, in one call (one round trip per tick).
--
-- KEYS[1] = emq:{q}:active
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = lease_ms (> 0): the new deadline is server TIME + lease_ms
-- ARGV[3..] = one triple per held lease: id, token (attempts at claim), nonce
--
-- Reply: a flat array of the leases that are lost, {id1, current1, id2, current2, ...}, where
--   current is: '' when the row is gone; the row's attempts when they moved on (a re-claim); the
--   lock value "<attempts>:<nonce>" of another claim when only the nonce differs; or the row's
--   state when the token still matches but the job is no longer active (reaped, settled).
-- A lease is extended only while the row is in state 'active', still scored in active, its
-- attempts equal the token, and the lock subkey (if present) carries this claim's nonce: a renew
-- can never put a pending, scheduled or dead job back into active (EchoMQ's D1).
--- @include now_ms
--- @include fence
local p, lease = ARGV[1], tonumber(ARGV[2])
local deadline = now_ms() + lease
local lost = {}
for i = 3, #ARGV, 3 do
  local id, token, nonce = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local row, state, verdict = fence(p, id, token, nonce)
  if verdict then
    lost[#lost + 1] = id
    lost[#lost + 1] = verdict[2] or ''
  elseif state ~= 'active' or not redis.call('ZSCORE', KEYS[1], id) then
    lost[#lost + 1] = id
    lost[#lost + 1] = state or ''
  else
    redis.call('ZADD', KEYS[1], 'XX', deadline, id)
    redis.call('SET', row .. ':lock', token .. ':' .. nonce, 'PX', 2 * lease)
  end
end
return lost

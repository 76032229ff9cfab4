-- complete: settle a held job as done; the row is deleted and counted.
--
-- KEYS[1] = emq:{q}:metrics:completed
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = job id
-- ARGV[3] = token (attempts at claim)
-- ARGV[4] = nonce of the claim
-- ARGV[5] = receipt_ms: how long the holder's receipt answers a re-sent settle
--
-- Reply: {'ok'}                 completed now
--        {'settled', outcome}   this holder already settled it (a re-sent command); nothing changed
--        {'gone'}               the row does not exist
--        {'stale', current}     another holder owns the job (current attempts or lock value)
--        {'state', state}       the token matches but the job is not held any more: scheduled,
--                               dead, or not in the set its state names; nothing changed
-- Accepted while the job is active, or reaped back to pending and not yet re-claimed (late but
-- uncontested). Deletes the row, its lock and logs subkeys; HINCRBY metrics:completed count 1.
--- @include fence
local p, id, token, nonce = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local row, refusal = settle_admit(p, id, token, nonce)
if refusal then
  return refusal
end
redis.call('DEL', row, row .. ':lock', row .. ':logs')
redis.call('HINCRBY', KEYS[1], 'count', 1)
redis.call('SET', row .. ':receipt', token .. ':' .. nonce .. ':completed', 'PX', ARGV[5])
return {'ok'}

-- fence(p, id, token, nonce): is the holder of (token, nonce) still the owner of job `id`?
-- Returns: row key, row state, and nil when the holder may write; otherwise a verdict to reply:
--   {'gone'}                 the row no longer exists
--   {'stale', current}       attempts moved on (a re-claim), or the lock subkey carries another
--                            claim's nonce (the same attempts handed out twice after Redis lost writes)
-- The lock subkey is checked only while it exists: the reaper deletes it, and a late holder whose
-- lease was reaped but not yet re-claimed is still the rightful (uncontested) owner.
local function fence(p, id, token, nonce)
  local row = p .. 'job:' .. id
  local fields = redis.call('HMGET', row, 'state', 'attempts')
  local state, attempts = fields[1], fields[2]
  if not attempts then
    return row, state, {'gone'}
  end
  if attempts ~= token then
    return row, state, {'stale', attempts}
  end
  local lock = redis.call('GET', row .. ':lock')
  if lock and lock ~= token .. ':' .. nonce then
    return row, state, {'stale', lock}
  end
  return row, state, nil
end

-- receipt_of(p, id, token, nonce): the outcome this holder already settled the job with, if any.
-- A settle re-sent by the client after a lost reply finds its own receipt and answers 'settled'.
local function receipt_of(p, id, token, nonce)
  local receipt = redis.call('GET', p .. 'job:' .. id .. ':receipt')
  local mine = token .. ':' .. nonce .. ':'
  if receipt and string.sub(receipt, 1, #mine) == mine then
    return string.sub(receipt, #mine + 1)
  end
  return nil
end

-- leave_lease(p, id, state): take a fenced job out of the set its state names. Accepted from
-- 'active', or from 'pending' when the reaper returned it and nobody has re-claimed it yet.
-- Returns true when the job was removed from that set.
local function leave_lease(p, id, state)
  if state == 'active' then
    return redis.call('ZREM', p .. 'active', id) == 1
  elseif state == 'pending' then
    return redis.call('ZREM', p .. 'pending', id) == 1
  end
  return false
end

-- wake(key, n): push up to n wake tokens (the list is kept at 64), one per parked worker to start.
local function wake(key, n)
  if n <= 0 then
    return
  end
  local tokens = {}
  for i = 1, math.min(n, 64) do
    tokens[i] = '1'
  end
  redis.call('LPUSH', key, unpack(tokens))
  redis.call('LTRIM', key, 0, 63)
end

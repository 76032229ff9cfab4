--- @include wake
--- @include receipts
-- fence(p, id, token, nonce): is the holder of (token, nonce) still the owner of job `id`?
-- Returns: row key, row state, and nil when the holder may write, then the row's dedup id, its
-- group and its flow link {parent, parent_queue} (read in the same HMGET, so a completion that
-- releases a dedup key or a lane, or tells a flow parent, costs no extra call); otherwise a
-- verdict:
--   {'gone'}                 the row no longer exists
--   {'stale', current}       attempts moved on (a re-claim), or the lock subkey carries another
--                            claim's nonce (the same attempts handed out twice after Redis lost writes)
-- The lock subkey is checked only while it exists: the reaper deletes it, and a late holder whose
-- lease was reaped but not yet re-claimed is still the rightful (uncontested) owner.
local function fence(p, id, token, nonce)
  local row = p .. 'job:' .. id
  local fields = redis.call('HMGET', row, 'state', 'attempts', 'dedup', 'group', 'parent',
    'parent_queue')
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
  return row, state, nil, fields[3], fields[4], {fields[5], fields[6]}
end

-- settle_admit(p, id, token, nonce): may this holder settle job `id` now? On yes, the job has
-- already left the set its state names and the reply is (row key, nil, the row's dedup id or
-- false, its group or false, true when it left `active`; false when it left pending, or its
-- group's lane: a late settle; its flow link, as fence() reads it). On no, nothing changed and the reply is (nil, the verdict):
--   {'settled', outcome}  this holder already settled it (its receipt answers a re-sent command)
--   {'gone'}, {'stale', current}  as fence() says
--   {'state', state}      the token matches, but the job is neither active nor reaped back to
--                         pending (still uncontested there): scheduled, dead, or not in its set
-- The common case (an active job, its own token) costs no receipt lookup: a receipt can only
-- matter once the job has left 'active'.
local function settle_admit(p, id, token, nonce)
  local row, state, verdict, dedup, group, link = fence(p, id, token, nonce)
  if not verdict and state == 'active' and redis.call('ZREM', p .. 'active', id) == 1 then
    return row, nil, dedup, group, true, link
  end
  local receipt = receipt_of(p, id)
  local mine = token .. ':' .. nonce .. ':'
  if receipt and string.sub(receipt, 1, #mine) == mine then
    return nil, {'settled', string.sub(receipt, #mine + 1)}
  end
  if verdict then
    return nil, verdict
  end
  -- A reaped grouped job waits in its lane (g:<group>:pending), an ungrouped one in pending.
  local waiting = group and (p .. 'g:' .. group .. ':pending') or (p .. 'pending')
  if state == 'pending' and redis.call('ZREM', waiting, id) == 1 then
    return row, nil, dedup, group, false, link
  end
  return nil, {'state', state or ''}
end

-- active_holder(p, id, token, nonce): the prelude of a running job's own writes (progress, log
-- lines): the row key when the holder still owns the job and it is active; else nil and the
-- reply to return, {status, detail}: 'gone', 'stale' (current) or 'state' (the job's state).
local function active_holder(p, id, token, nonce)
  local row, state, verdict = fence(p, id, token, nonce)
  if verdict then
    return nil, {verdict[1], verdict[2] or ''}
  end
  if state ~= 'active' then
    return nil, {'state', state or ''}
  end
  return row, nil
end

--- @include receipts
-- forget(p, id, row): delete a job's row and every key of ours named after it (:lock, :logs,
-- result:<id>, result:<id>:ready) and its receipt (a field of a receipts hash), and its de:<did>
-- key while that still names it.
-- For the verbs that delete jobs in bulk (drain, obliterate); EchoMQ's delete the row, :logs
-- and (obliterate) :lock only (D9).
local function forget(p, id, row)
  local did = redis.call('HGET', row, 'dedup')
  if did and redis.call('GET', p .. 'de:' .. did) == id then
    redis.call('DEL', p .. 'de:' .. did)
  end
  redis.call('DEL', row, row .. ':lock', row .. ':logs', p .. 'result:' .. id,
    p .. 'result:' .. id .. ':ready')
  redis.call('HDEL', receipts_key(p, id), receipt_field(id))
end

-- progress: the holder of a running job records its progress on the row and announces it on the
-- queue's events channel; fenced like a settle, so a stale holder cannot report.
--
-- KEYS[1] = emq:{q}:job:<id> (the row; named so that the call routes to the queue's slot)
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = q, the queue name (for the event)
-- ARGV[3] = job id
-- ARGV[4] = token (the attempts value of the holder's claim)
-- ARGV[5] = nonce (the holder's claim nonce)
-- ARGV[6] = progress, JSON text: a number or an object (checked by the caller)
--
-- Reply: {status, detail}
--   'ok', receivers      written: HSET row progress, then PUBLISH p.."events" of
--                        {"event":"progress","queue":q,"job_id":id,"job":id,"attempts":n,"at_ms":now,
--                         "progress":<value>}; receivers = the subscribers that got it
--   'gone', ''           the row does not exist
--   'stale', current     another holder owns the job (its attempts, or its lock value)
--   'state', state       the token matches but the job is not active any more (reaped)
--- @include now_ms
--- @include fence
local p, q, id, token, nonce, value = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local row, refusal = active_holder(p, id, token, nonce)
if refusal then
  return refusal
end
redis.call('HSET', row, 'progress', value)
local event = '{"event":"progress","queue":' .. cjson.encode(q) .. ',"job_id":' .. cjson.encode(id)
  .. ',"job":' .. cjson.encode(id) .. ',"attempts":' .. token .. ',"at_ms":' .. now_ms() .. ',"progress":' .. value .. '}'
return {'ok', redis.call('PUBLISH', p .. 'events', event)}

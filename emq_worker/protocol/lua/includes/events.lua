-- Lifecycle events on the channel p.."events" (at-most-once: PUBLISH, no storage). A script
-- asks listening() once per call and emits nothing when nobody is subscribed, so events cost the
-- hot path one PUBSUB NUMSUB per call and nothing per job.
local function listening(p)
  return redis.call('PUBSUB', 'NUMSUB', p .. 'events')[2] > 0
end

-- emit(p, event, id, attempts, at_ms, extra): PUBLISH {"event", "queue", "job_id", "job",
-- "attempts", "at_ms", ...extra} as JSON; the queue name is read back from the prefix "emq:{q}:".
-- The id goes under both names: our readers use `job_id`, EchoMQ's subscribers match `job`.
local function emit(p, event, id, attempts, at_ms, extra)
  local body = extra or {}
  body['event'] = event
  body['queue'] = string.sub(p, 6, -3)
  body['job_id'] = id
  body['job'] = id
  body['attempts'] = tonumber(attempts)
  body['at_ms'] = at_ms
  redis.call('PUBLISH', p .. 'events', cjson.encode(body))
end

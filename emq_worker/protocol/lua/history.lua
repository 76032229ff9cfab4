-- history: a worker adds what it did on a queue since its last flush to the queue's history:
-- counts into the bucket of the current minute and of the current hour (server clock), and the
-- jobs it settled lately onto the settled log. Sent by the beat every few seconds, never per
-- job; every key it writes expires by itself. Not re-sent on a lost reply (it would count twice).
--
-- KEYS[1] = emq:{q}:history:settled (the settled log; named so that the call routes to the queue's slot)
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = minutes_kept_ms: a minute bucket expires this long after its minute ends
-- ARGV[3] = hours_kept_ms: an hour bucket expires this long after its hour ends
-- ARGV[4] = settled_kept: entries the settled log keeps (LTRIM)
-- ARGV[5] = settled_keep_ms: the settled log's TTL, refreshed by each call that adds to it
-- ARGV[6] = n, field/delta pairs added to both buckets (HINCRBY)
-- ARGV[7] = t, field/delta pairs added to the hour bucket only (the per-task fields)
-- ARGV[8] = s, settled entries
-- then the n pairs, the t pairs, and s pairs `age_ms, entry`: entry is a JSON object to which
-- the script adds "at_ms" = now - age_ms before it LPUSHes it
--
-- Keys built from p: p.."history:m:"..<minute start ms>, p.."history:h:"..<hour start ms>
-- (HASHes; PEXPIREAT end + kept).
--
-- Reply: now_ms, the server time the call used
-- Errors: WRONGTYPE <key> ..., before any write, when one of the keys holds another type
--- @include now_ms
local p = ARGV[1]
local minutes_kept, hours_kept = tonumber(ARGV[2]), tonumber(ARGV[3])
local settled_kept, settled_keep_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
local n, t, s = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local now = now_ms()
local minute = now - now % 60000
local hour = now - now % 3600000
local minute_key = p .. 'history:m:' .. string.format('%.0f', minute)
local hour_key = p .. 'history:h:' .. string.format('%.0f', hour)
-- Refuse before any write when a key is of another type (someone else's), so a call either
-- counts everything or nothing: the worker re-sends the same deltas next time.
for key, want in pairs({[minute_key] = 'hash', [hour_key] = 'hash', [KEYS[1]] = 'list'}) do
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'none' and kind ~= want then
    return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. kind .. ', not a ' .. want)
  end
end
local at = 9
for _ = 1, n do
  redis.call('HINCRBY', minute_key, ARGV[at], ARGV[at + 1])
  redis.call('HINCRBY', hour_key, ARGV[at], ARGV[at + 1])
  at = at + 2
end
for _ = 1, t do
  redis.call('HINCRBY', hour_key, ARGV[at], ARGV[at + 1])
  at = at + 2
end
if n > 0 then
  redis.call('PEXPIREAT', minute_key, string.format('%.0f', minute + 60000 + minutes_kept))
end
if n + t > 0 then
  redis.call('PEXPIREAT', hour_key, string.format('%.0f', hour + 3600000 + hours_kept))
end
if s > 0 then
  for _ = 1, s do
    local entry = cjson.decode(ARGV[at + 1])
    entry['at_ms'] = now - tonumber(ARGV[at])
    redis.call('LPUSH', KEYS[1], cjson.encode(entry))
    at = at + 2
  end
  redis.call('LTRIM', KEYS[1], 0, settled_kept - 1)
  redis.call('PEXPIRE', KEYS[1], settled_keep_ms)
end
return now

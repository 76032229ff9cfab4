-- renew: extend the leases a worker holds on one queue. The worker sends one call per 50 leases,
-- all in one pipeline: one round trip per tick, and no call holds the server for long.
--
-- KEYS[1] = emq:{q}:active
-- KEYS[2] = emq:{q}:cancel (the running jobs an operator asked to cancel)
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = lease_ms (> 0): the new deadline is server TIME + lease_ms
-- ARGV[3..] = one triple per held lease: id, token (attempts at claim), nonce
--
-- Reply: a flat array of the leases that are lost, {id1, current1, id2, current2, ...}, where
--   current is: '' when the row is gone; the row's attempts when they moved on (a re-claim); the
--   lock value "<attempts>:<nonce>" of another claim when only the nonce differs; the row's
--   state when the token still matches but the job is no longer active (reaped, settled); or
--   'cancel' for a lease that is renewed and still held, but whose job an operator asked to
--   cancel (the holder stops it and settles it dead: no extra round trip is needed).
-- A lease is extended only while the row is in state 'active', still scored in active, its
-- attempts equal the token, and the lock subkey (if present) carries this claim's nonce: a renew
-- can never put a pending, scheduled or dead job back into active (EchoMQ's D1).
-- Events: 'fenced' per lease lost (not for 'cancel'), with current, only while someone
-- subscribes to p.."events".
--- @include now_ms
--- @include events
local p, lease = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local deadline = now + lease
local lock_ttl = 2 * lease
local lost = {}
local cancelled = {}
if redis.call('SCARD', KEYS[2]) > 0 then
  for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do
    cancelled[id] = true
  end
end

local listeners = nil

local function lose(id, current, token)
  lost[#lost + 1] = id
  lost[#lost + 1] = current or ''
  if current ~= 'cancel' then
    if listeners == nil then
      listeners = listening(p)  -- asked once, and only when a lease is lost
    end
    if listeners then
      emit(p, 'fenced', id, token, now, {outcome = 'renew', current = current or ''})
    end
  end
end

-- The common path costs three calls per lease: HMGET, SET ... GET and ZADD XX CH. Each refusal
-- takes a slower path that undoes nothing it should not have done.
for i = 3, #ARGV, 3 do
  local id, token, nonce = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local row = p .. 'job:' .. id
  local fields = redis.call('HMGET', row, 'state', 'attempts')
  local state, attempts = fields[1], fields[2]
  if attempts ~= token or state ~= 'active' then
    lose(id, attempts ~= token and attempts or state, token)
  else
    local mine = token .. ':' .. nonce
    local previous = redis.call('SET', row .. ':lock', mine, 'XX', 'PX', lock_ttl, 'GET')
    if previous and previous ~= mine then
      -- Another claim's nonce: put its lock back (with a full TTL) and report the lease lost.
      redis.call('SET', row .. ':lock', previous, 'PX', lock_ttl)
      lose(id, previous, token)
    elseif redis.call('ZADD', KEYS[1], 'XX', 'CH', deadline, id) == 0
        and not redis.call('ZSCORE', KEYS[1], id) then
      lose(id, state, token)  -- no longer in active, though its row says so
    else
      if not previous then
        redis.call('SET', row .. ':lock', mine, 'PX', lock_ttl)  -- the lock had gone: restore it
      end
      if cancelled[id] then
        lose(id, 'cancel', token)  -- renewed and still held: the holder stops it and settles it dead
      end
    end
  end
end
return lost

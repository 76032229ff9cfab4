-- lock_hold(row, state): what still guards the job at `row` (whose state is `state`) from
-- remove and reprocess: 'marker' (the :lock subkey), 'field' (the row's `lock` field, written by
-- EchoMQ's Locks plane), or nil when nothing live does.
-- * A :lock in our `<attempts>:<nonce>` form on a row that is not active names a lapsed claim:
--   our claims set state active with the lock, and every exit of ours deletes it, so only
--   another client's move (EchoMQ's stalled sweep or reap) leaves one behind; it holds nothing.
--   Any other marker (EchoMQ's bare token, a test's `worker-1`) holds.
-- * The `lock` field holds on a row that is not dead (EchoMQ's conformance: a bare field on a
--   pending job refuses). On a dead row it holds only while it can still be live: it carries a
--   field TTL (HPTTL > 0; Redis >= 7.4, Valkey >= 9). Without one, its plane's marker (which
--   always has a PX) is gone and the field would otherwise refuse forever (D13).
local function lock_hold(row, state)
  local marker = redis.call('GET', row .. ':lock')
  if marker and (state == 'active' or not string.match(marker, '^%d+:%x+$')) then
    return 'marker'
  end
  if redis.call('HEXISTS', row, 'lock') == 0 then
    return nil
  end
  if state ~= 'dead' then
    return 'field'
  end
  -- pcall: a server without field TTL answers HPTTL with an unknown-command error.
  local ttl = redis.pcall('HPTTL', row, 'FIELDS', 1, 'lock')
  if type(ttl) == 'table' and type(ttl[1]) == 'number' and ttl[1] > 0 then
    return 'field'
  end
  return nil
end

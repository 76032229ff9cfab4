-- lanes: what the lanes of a queue hold (read only), for stats and metrics: the deepest `top`
-- lanes among the groups the queue names.
--
-- KEYS[1] = emq:{q}:ring
-- KEYS[2] = emq:{q}:paused
-- KEYS[3] = emq:{q}:glimit
-- KEYS[4] = emq:{q}:gactive
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = top: how many lanes to list, deepest first (ties by name)
-- ARGV[3] = scan: the most names to read from each of the four keys
--
-- Groups are found where the wire names them (there is no registry of groups): the ring (every
-- lane that can be served), paused, glimit and gactive; a lane in none of them holds no job a
-- claim could take now. Each of the four is read whole when it has at most `scan` names, else its
-- first `scan` (then `complete` is 0).
-- Reply: {groups, complete, waiting, serviceable, g1, depth1, active1, limit1, paused1, ...}:
--   groups = names found; waiting = jobs in their lanes; serviceable = LLEN ring;
--   per listed lane: its ZCARD, its gactive, its glimit (0: none), 1 when paused.
--- @include lanes
local p, top, scan = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local names, seen, complete = {}, {}, 1
local function add(list)
  for _, g in ipairs(list) do
    if not seen[g] then
      seen[g] = true
      names[#names + 1] = g
    end
  end
end
add(redis.call('LRANGE', KEYS[1], 0, scan - 1))
if redis.call('LLEN', KEYS[1]) > scan then
  complete = 0
end
if redis.call('SCARD', KEYS[2]) <= scan then
  add(redis.call('SMEMBERS', KEYS[2]))
else
  complete = 0
  add(redis.call('SSCAN', KEYS[2], 0, 'COUNT', scan)[2])
end
for i = 3, 4 do
  if redis.call('HLEN', KEYS[i]) <= scan then
    add(redis.call('HKEYS', KEYS[i]))
  else
    complete = 0
    local page = redis.call('HSCAN', KEYS[i], 0, 'COUNT', scan)[2]
    local keys = {}
    for j = 1, #page, 2 do
      keys[#keys + 1] = page[j]
    end
    add(keys)
  end
end
local lanes, waiting = {}, 0
for _, g in ipairs(names) do
  local depth = redis.call('ZCARD', lane_key(p, g))
  waiting = waiting + depth
  lanes[#lanes + 1] = {g, depth}
end
table.sort(lanes, function(a, b)
  return a[2] > b[2] or (a[2] == b[2] and a[1] < b[1])
end)
local reply = {#names, complete, waiting, redis.call('LLEN', KEYS[1])}
for i = 1, math.min(top, #lanes) do
  local g = lanes[i][1]
  reply[#reply + 1] = g
  reply[#reply + 1] = lanes[i][2]
  reply[#reply + 1] = tonumber(redis.call('HGET', KEYS[4], g) or '0')
  reply[#reply + 1] = tonumber(redis.call('HGET', KEYS[3], g) or '0')
  reply[#reply + 1] = redis.call('SISMEMBER', KEYS[2], g)
end
return reply

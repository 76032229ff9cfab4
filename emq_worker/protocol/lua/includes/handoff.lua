-- withdraw_offer(p, offers, active, offer_nonce, lease): take a worker's hand-off offer back (see
-- claim.lua) and empty its hand-off list. Returns the jobs on that list that are still leased to
-- the offer, each {id, attempts, payload, row}: its lock is still "<attempts>:<offer nonce>", its
-- state 'active', and it is in `active` (a job the reaper took back, or another worker holds now,
-- is left alone). After this call nothing more can be handed to the offer.
local function withdraw_offer(p, offers, active, offer_nonce, lease)
  redis.call('ZREM', offers, offer_nonce .. ':' .. lease)
  local box = p .. 'handoff:' .. offer_nonce
  local items = redis.call('LRANGE', box, 0, -1)
  redis.call('DEL', box)
  local held = {}
  for _, item in ipairs(items) do
    -- "<attempts>:<id>:<payload>": ids never hold ':' (enqueue.lua hands no such id off).
    local colon = string.find(item, ':', 1, true)
    local second = colon and string.find(item, ':', colon + 1, true)
    if second then
      local attempts, id = string.sub(item, 1, colon - 1), string.sub(item, colon + 1, second - 1)
      local row = p .. 'job:' .. id
      if redis.call('GET', row .. ':lock') == attempts .. ':' .. offer_nonce
        and redis.call('HGET', row, 'state') == 'active'
        and redis.call('ZSCORE', active, id)
      then
        held[#held + 1] = {id, attempts, string.sub(item, second + 1), row}
      end
    end
  end
  return held
end

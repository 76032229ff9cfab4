-- payload_filter: the jobs of one set whose payload contains a text (read only), for the
-- dashboard's filter on a queue tab. Bounded: at most `scan` members looked at, and a payload
-- longer than `peek` bytes is not read.
--
-- KEYS[1] = emq:{q}:pending
-- KEYS[2] = emq:{q}:schedule
-- KEYS[3] = emq:{q}:active
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = the set to look in: 1 pending, 2 schedule, 3 active
-- ARGV[3] = the text, its ASCII letters lower-cased by the caller (compared without their case)
-- ARGV[4] = scan: the most members to look at, from the head of the set in the order asked
-- ARGV[5] = 1 to look from the tail (highest score, then latest id, first), else 0
-- ARGV[6] = peek: the longest payload read, in bytes
-- ARGV[7] = keep: the most matching members to reply with
--
-- Reply: {total, scanned, too_large, matched, id1, score1, ...}: ZCARD of the set; members
--   looked at; of those, payloads not read (longer than peek); matches (all counted); the first
--   `keep` matches with their scores, in the order looked at.
local p, key, needle = ARGV[1], KEYS[tonumber(ARGV[2])], ARGV[3]
local scan, peek, keep = tonumber(ARGV[4]), tonumber(ARGV[6]), tonumber(ARGV[7])
local members
if ARGV[5] == '1' then
  members = redis.call('ZREVRANGE', key, 0, scan - 1, 'WITHSCORES')
else
  members = redis.call('ZRANGE', key, 0, scan - 1, 'WITHSCORES')
end
local kept, too_large, matched = {}, 0, 0
for i = 1, #members, 2 do
  local row = p .. 'job:' .. members[i]
  if redis.call('HSTRLEN', row, 'payload') > peek then
    too_large = too_large + 1
  else
    local payload = redis.call('HGET', row, 'payload')
    if payload and string.find(string.lower(payload), needle, 1, true) then
      matched = matched + 1
      if matched <= keep then
        kept[#kept + 1] = members[i]
        kept[#kept + 1] = members[i + 1]
      end
    end
  end
end
local reply = {redis.call('ZCARD', key), #members / 2, too_large, matched}
for _, value in ipairs(kept) do
  reply[#reply + 1] = value
end
return reply

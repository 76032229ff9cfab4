-- flow_ack: remove delivered entries from a queue's flow outbox, each by its value (LREM 1), so
-- an entry pushed since the sweep read the list is never removed unseen, and two sweepers
-- acking the same entry remove it once.
--
-- KEYS[1] = emq:{q}:flow:outbox
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2..] = the entries delivered (byte for byte as read)
--
-- Reply: how many entries were removed.
local removed = 0
for i = 2, #ARGV do
  removed = removed + redis.call('LREM', KEYS[1], 1, ARGV[i])
end
return removed

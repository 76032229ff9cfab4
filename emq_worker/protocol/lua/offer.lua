-- offer: keep a worker's standing hand-off offer (see claim.lua) standing for offer_ms more,
-- without a claim. An idle queue's offer lapses a third of a lease after it was made; renewing it
-- with a claim cost fourteen commands, this costs four.
--
-- KEYS[1] = emq:{q}:offers
-- ARGV[1] = the offer, "<offer nonce>:<lease_ms>" as claim.lua made it
-- ARGV[2] = offer_ms (> 0): the offer now lapses this many ms from now (server clock)
--
-- Reply: 1 when the offer was still in KEYS[1] (now scored now + offer_ms); 0 when it was not
-- (enqueue.lua used it: its job waits on the hand-off list; a claim or withdraw took it back; the
-- set expired): nothing is written, and the worker claims the queue instead, which takes over what
-- was handed and leaves a new offer. A lapsed offer still in the set stands again: its worker is
-- parked on its hand-off list, as when it was made. `ZADD XX` never adds an offer, so a re-sent
-- call sets the same kind of lapse from its own now, and nothing else. `CH` says the offer was
-- there when its score moved (it moves with the clock), so the ZSCORE that tells is read only when
-- it did not (a re-send within the same millisecond).
--- @include now_ms
local offer_ms = tonumber(ARGV[2])
local moved = redis.call('ZADD', KEYS[1], 'XX', 'CH', now_ms() + offer_ms, ARGV[1])
if moved == 0 and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
-- The set outlives its newest offer, and never lapses before a longer one (GT: Redis >= 7.0).
redis.call('PEXPIRE', KEYS[1], offer_ms, 'GT')
return 1

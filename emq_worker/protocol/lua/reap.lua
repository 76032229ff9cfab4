-- reap: return expired leases to pending on the server clock, or dead-letter a crash loop.
--
-- KEYS[1] = emq:{q}:active
-- KEYS[2] = emq:{q}:pending
-- KEYS[3] = emq:{q}:dead
-- KEYS[4] = emq:{q}:metrics:failed
-- KEYS[5] = emq:{q}:wake
-- KEYS[6] = emq:{q}:suspects (SET): a job returned to pending is SADDed (claim keeps suspects apart,
--           one per worker) when this is its second reap (the row's `reaps` counts them), or
--           when its next attempt is its last: its holders died or froze running it twice, maybe
--           because of it, or one more death beside another suspect would dead-letter it. A job
--           dead-lettered or found gone is SREMed. (A single death, a crash, a freeze or a
--           partition, makes no suspect. Every job returned gets `reaped_at`, the server time of
--           the reap: claim lets a suspect share a worker once it has waited half a lease.)
--           Each SADD sets the set's PX to a day.
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = batch: the most leases to reap in this call (ZRANGEBYSCORE ... LIMIT 0 batch)
-- ARGV[3] = max_attempts: a lease that expires at attempts - attempts_base >= max_attempts goes
--           to dead with last_error "lease expired ..." instead of cycling forever (EchoMQ's D2)
--           and its attempts and attempts_base + 1, so its lapsed holder's late complete, retry,
--           delay or renew is refused as stale (docs/protocol.md, "Dead-lettering fences")
--
-- A member whose row is not active (EchoMQ's renew put it back: D1) is only ZREMed: not counted,
-- not moved, not listed. A job returned goes to pending at its priority (the row's `priority`;
-- 0 when absent); a grouped one goes back to its group's lane, and gactive counts it out whether
-- it is returned or dead-lettered (includes/lanes.lua), so its lane joins the ring again.
-- Reply: {returned, dead_lettered, phantoms, more, id1, outcome1, id2, outcome2, ...}; more = 1
--        when the batch was full and another call may find more; outcome is 'pending' or 'dead'
--        for each job reaped (phantoms are not listed). Each reaped job loses its lock subkey;
--        returned jobs push wake tokens.
-- A flow child dead-lettered here tells its parent, as a settle's dead outcome does
-- (includes/flows.lua); a parent that thereby goes to pending adds a wake token.
-- Events: 'reaped' per job reaped (outcome pending or dead; error for dead), only while someone
-- subscribes to p.."events".
--- @include now_ms
--- @include reaping
local keys = {
  active = KEYS[1], pending = KEYS[2], dead = KEYS[3], failed = KEYS[4], wake = KEYS[5],
  suspects = KEYS[6],
}
local returned, dead, phantoms, more, reaped =
  reap_due(ARGV[1], keys, tonumber(ARGV[2]), tonumber(ARGV[3]), now_ms())
local reply = {returned, dead, phantoms, more and 1 or 0}
for i = 1, #reaped do
  reply[4 + i] = reaped[i]
end
return reply

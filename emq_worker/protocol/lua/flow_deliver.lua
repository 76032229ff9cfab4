-- flow_deliver: count children of another queue in their parents of this queue: the entries a
-- beat read from a child queue's flow:outbox (includes/flows.lua has their form). Each count is
-- guarded by the child's id in the parent's record (:processed, :failed, :unsuccessful), so an
-- entry delivered twice (two sweepers, or a sweep that died before its ack) counts once; an
-- entry whose parent row is gone counts nothing (EchoMQ's deliver would write a phantom).
--
-- KEYS[1] = emq:{q}:pending
-- KEYS[2] = emq:{q}:wake
-- ARGV[1] = p, the queue prefix "emq:{q}:" of the parents
-- ARGV[2..] = one quadruple per entry: kind, parent, child, detail
--   kind 'done'       the child completed; detail = its result
--   kind 'fp' or 'id' the child went dead under that policy; detail = its error (fp fails a
--                     waiting parent, and a parent that is itself a child passes its death up;
--                     id counts the child as done)
--
-- Reply: {entries, released}: released = parents that went to pending (one wake each).
--- @include wake
--- @include flows
local p = ARGV[1]
local entries, released = 0, 0
for i = 2, #ARGV, 4 do
  local kind, parent, child, detail = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if kind == 'done' then
    released = released + flow_done(p, parent, child, detail)
  else
    released = released + flow_dead(p, parent, child, kind, detail)
  end
  entries = entries + 1
end
wake(KEYS[2], released)
return {entries, released}

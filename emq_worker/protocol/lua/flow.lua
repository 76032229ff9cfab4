-- flow: write the jobs of a flow (parents and their children) that live in one queue, all or
-- none. A flow in one queue is one call; a flow across queues is one call per connected part
-- in one queue, parents' parts first (jobs/flow_tree.py), so a child never exists before its parent.
--
-- KEYS[1] = emq:{q}:pending
-- KEYS[2] = emq:{q}:wake
-- ARGV[1] = p, the queue prefix "emq:{q}:"
-- ARGV[2] = nonce, fresh for each call; p.."enqueue:"..nonce keeps the reply for memo_ms once
--           the call wrote, so a re-sent call (its reply lost) replies it again, writing nothing
-- ARGV[3] = memo_ms (0: no memo)
-- ARGV[4..] = one sextuple per job: id, payload, parent, parent_queue, policy, children
--   parent        the parent's id ('' for the flow's root)
--   parent_queue  the parent's queue when it is not this one, else ''
--   policy        'fp' (its death fails the parent) or 'id' (its death counts as done); '' for
--                 the root
--   children      how many children it has: 0 writes it ready ({state pending, attempts 0,
--                 payload} and ZADD pending 0, one wake); n > 0 holds it out of every set with
--                 {state awaiting_children, attempts 0, payload} and job:<id>:dependencies = n
--                 (a STRING), until its children are done (includes/flows.lua); its id joins
--                 p.."flow:held" (a ZSET, score 0: the parents held, in mint order)
-- A child's row also gets parent, parent_policy and (another queue's parent) parent_queue: the
-- fields EchoMQ's complete and retry read.
--
-- Reply: {'ok', jobs written}; or {'exists', id} when a row with that id already exists
-- (nothing written). A re-send gets the first copy's reply.
-- Errors: EMQKIND when any id is not JOB-namespaced, checked for every job before any write.
--- @include wake
local p, memo_ms = ARGV[1], tonumber(ARGV[3])
local memo = p .. 'enqueue:' .. ARGV[2]
if memo_ms > 0 and redis.call('EXISTS', memo) == 1 then
  return {'ok', redis.call('GET', memo)}
end
local FIRST, WIDTH = 4, 6
for i = FIRST, #ARGV, WIDTH do
  if string.sub(ARGV[i], 1, 3) ~= 'JOB' then
    return redis.error_reply('EMQKIND job id must be JOB-namespaced: ' .. ARGV[i])
  end
end
for i = FIRST, #ARGV, WIDTH do
  if redis.call('EXISTS', p .. 'job:' .. ARGV[i]) == 1 then
    return {'exists', ARGV[i]}
  end
end
local ready, written = 0, 0
for i = FIRST, #ARGV, WIDTH do
  local id, payload, parent, parent_queue, policy = ARGV[i], ARGV[i + 1], ARGV[i + 2],
    ARGV[i + 3], ARGV[i + 4]
  local children = tonumber(ARGV[i + 5])
  local row = p .. 'job:' .. id
  if children > 0 then
    redis.call('HSET', row, 'state', 'awaiting_children', 'attempts', '0', 'payload', payload)
    redis.call('DEL', row .. ':processed', row .. ':failed', row .. ':unsuccessful')
    redis.call('SET', row .. ':dependencies', children)
    redis.call('ZADD', p .. 'flow:held', 0, id)
  else
    redis.call('HSET', row, 'state', 'pending', 'attempts', '0', 'payload', payload)
    redis.call('ZADD', KEYS[1], 0, id)
    ready = ready + 1
  end
  if parent ~= '' then
    redis.call('HSET', row, 'parent', parent, 'parent_policy', policy)
    if parent_queue ~= '' then
      redis.call('HSET', row, 'parent_queue', parent_queue)
    end
  end
  written = written + 1
end
wake(KEYS[2], ready)
if memo_ms > 0 then
  redis.call('SET', memo, written, 'PX', memo_ms)
end
return {'ok', written}

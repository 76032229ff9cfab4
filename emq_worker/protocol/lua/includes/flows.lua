-- Flows: EchoMQ's parent/child jobs (docs/protocol.md, section 5b). A parent row waits in no
-- set with state 'awaiting_children'; `job:<parent>:dependencies` (a STRING integer) counts the
-- children not yet done. A child row carries `parent` (the parent's id), `parent_policy` ('fp':
-- its death fails the parent; 'id': its death counts as done) and, when the parent lives in
-- another queue, `parent_queue`. The parent's subkeys record each child once, by child id:
-- `:processed` (its result), `:failed` (its error, policy fp), `:unsuccessful` (its error,
-- policy id). A child of another queue cannot reach its parent's slot: it RPUSHes an entry to
-- its own queue's `flow:outbox`, which a beat sweeps (flow_deliver.lua):
--   completed:  <parent_queue> \0 <parent> \0 <child> \0 <result>
--   dead:       '' \0 'fail' \0 <parent_queue> \0 <parent> \0 <child> \0 <policy> \0 <error>
-- Every count is guarded by the HSETNX of the child's id, so a count delivered twice (a re-sent
-- settle, a sweep that died before its ack) moves nothing twice: no parent is released early.
-- Each function returns how many parents it released to pending (the caller's wake tokens).
-- `flow:held` (a ZSET, score 0, ours) lists the parents our flow script holds: a parent leaves
-- it when released, failed or removed (readers check the row: a parent EchoMQ's scripts
-- released stays a member until it is removed or its queue obliterated).

-- An upward cascade of deaths takes one step per level; EchoMQ caps a tree at 8 levels.
local FLOW_HOPS = 16
local FLOW_ERROR_BYTES = 1024

local function flow_queue_of(p)
  return string.sub(p, 6, -3)
end

local function flow_other_queue(p, parent_queue)
  return parent_queue and parent_queue ~= '' and parent_queue ~= flow_queue_of(p)
end

-- flow_release(p, parent, prow): the last child is done; only a parent still waiting moves (one
-- that a child's death failed stays dead: EchoMQ would put it back in pending).
local function flow_release(p, parent, prow)
  if redis.call('HGET', prow, 'state') ~= 'awaiting_children' then
    return 0
  end
  redis.call('HSET', prow, 'state', 'pending')
  redis.call('ZADD', p .. 'pending', 0, parent)
  redis.call('ZREM', p .. 'flow:held', parent)
  return 1
end

-- flow_count_down(p, parent, prow): one more child of `parent` is settled for good (completed,
-- or dead under policy id); the last one releases the parent.
local function flow_count_down(p, parent, prow)
  if redis.call('DECR', prow .. ':dependencies') > 0 then
    return 0
  end
  return flow_release(p, parent, prow)
end

-- flow_done(p, parent, child, value): `child` of `parent` (queue prefix p) completed.
local function flow_done(p, parent, child, value)
  local prow = p .. 'job:' .. parent
  if redis.call('EXISTS', prow) == 0 then
    return 0 -- the parent was removed: nothing left to count (EchoMQ would write a phantom)
  end
  if redis.call('HSETNX', prow .. ':processed', child, value) == 0 then
    return 0 -- counted before
  end
  if redis.call('HDEL', prow .. ':unsuccessful', child) == 1 then
    return 0 -- its death was counted (policy id); a dead retry then completed it: count once
  end
  return flow_count_down(p, parent, prow)
end

local function flow_fail_entry(p, parent_queue, parent, child, policy, err)
  local entry = table.concat({'', 'fail', parent_queue, parent, child, policy, err}, '\0')
  redis.call('RPUSH', p .. 'flow:outbox', entry)
end

-- flow_fail_parent(p, parent, prow, child, err): policy fp, first death recorded: a parent still
-- waiting goes dead, with the reason (EchoMQ leaves its last_error unset). Returns its new
-- last_error, or nil when it was not waiting any more.
local function flow_fail_parent(p, parent, prow, child, err)
  if redis.call('HGET', prow, 'state') ~= 'awaiting_children' then
    return nil
  end
  local reason = string.sub('child ' .. child .. ' failed: ' .. err, 1, FLOW_ERROR_BYTES)
  redis.call('HSET', prow, 'state', 'dead', 'last_error', reason)
  redis.call('ZADD', p .. 'dead', 0, parent)
  redis.call('ZREM', p .. 'flow:held', parent)
  redis.call('HINCRBY', p .. 'metrics:failed', 'count', 1)
  return reason
end

-- flow_dead(p, parent, child, policy, err): `child` of `parent` (queue prefix p) went dead. A
-- parent it fails that is itself a child passes its death up, in this call while the levels
-- share the queue, through its own outbox where they do not.
local function flow_dead(p, parent, child, policy, err)
  for _ = 1, FLOW_HOPS do
    local prow = p .. 'job:' .. parent
    if redis.call('EXISTS', prow) == 0 then
      return 0
    end
    if policy == 'id' then
      if redis.call('HEXISTS', prow .. ':processed', child) == 1 then
        return 0
      end
      if redis.call('HSETNX', prow .. ':unsuccessful', child, err) == 0 then
        return 0
      end
      return flow_count_down(p, parent, prow)
    end
    if redis.call('HSETNX', prow .. ':failed', child, err) == 0 then
      return 0
    end
    err = flow_fail_parent(p, parent, prow, child, err)
    if not err then
      return 0
    end
    local link = redis.call('HMGET', prow, 'parent', 'parent_queue', 'parent_policy')
    if not link[1] then
      return 0
    end
    child, parent, policy = parent, link[1], link[3] == 'id' and 'id' or 'fp'
    if flow_other_queue(p, link[2]) then
      flow_fail_entry(p, link[2], parent, child, policy, err)
      return 0
    end
  end
  return 0
end

-- flow_completed(p, row, id, value, link): the job `id` completes (its row still there); a flow
-- child counts in its parent. value: its result, or nil (then its id, as EchoMQ records). link:
-- the row's {parent, parent_queue} when the caller read them already (fence() does), else nil.
local function flow_completed(p, row, id, value, link)
  link = link or redis.call('HMGET', row, 'parent', 'parent_queue')
  if not link[1] then
    return 0
  end
  value = value or id
  if flow_other_queue(p, link[2]) then
    redis.call('RPUSH', p .. 'flow:outbox', table.concat({link[2], link[1], id, value}, '\0'))
    return 0
  end
  return flow_done(p, link[1], id, value)
end

-- flow_failed(p, row, id, err): the job `id` went dead; a flow child tells its parent.
local function flow_failed(p, row, id, err)
  local link = redis.call('HMGET', row, 'parent', 'parent_queue', 'parent_policy')
  if not link[1] then
    return 0
  end
  local policy = link[3] == 'id' and 'id' or 'fp'
  err = string.sub(err, 1, FLOW_ERROR_BYTES)
  if flow_other_queue(p, link[2]) then
    flow_fail_entry(p, link[2], link[1], id, policy, err)
    return 0
  end
  return flow_dead(p, link[1], id, policy, err)
end

-- flow_retire(p, id): the job `id` leaves for good: a parent's subkeys go with it (EchoMQ
-- leaves them), and its member of `flow:held`.
local function flow_retire(p, id)
  local row = p .. 'job:' .. id
  redis.call('DEL', row .. ':dependencies', row .. ':processed', row .. ':failed',
    row .. ':unsuccessful')
  redis.call('ZREM', p .. 'flow:held', id)
end

-- next_attempt(value): the attempts that follow `value` (a row's attempts field; false when it is
-- absent: 0) when it is a plain counter Lua's numbers hold exactly, to write with the state in
-- one HSET; nil otherwise, and HINCRBY then decides (it takes any 64-bit integer, and refuses
-- what is none: the job is dead-lettered with the value).
local function next_attempt(value)
  if not value then
    return 1
  end
  if value == '0' or (#value <= 15 and string.match(value, '^[1-9]%d*$')) then
    return tonumber(value) + 1
  end
  return nil
end

-- lock_value(attempts, nonce): the lock subkey's "<attempts>:<nonce>", attempts as an integer
-- (Lua's own tostring writes 1e+14 from 14 zeros on, which no fence matches).
local function lock_value(attempts, nonce)
  return string.format('%d', attempts) .. ':' .. nonce
end

-- fence_out_holder(row): a job just dead-lettered is given a token nobody holds: attempts + 1,
-- so its last holder's late complete, retry, delay or renew (ours, or EchoMQ's scripts, which
-- compare the token and never the state) is refused as stale instead of deleting the row and
-- leaving its id in `dead` without one. attempts_base rises with it, so the retry budget
-- (attempts - attempts_base) still counts only attempts that ran, and `fenced` records the raised
-- value: while attempts still equals it, readers show attempts - 1, the attempts that ran. An
-- attempts field that is no integer cannot be raised and needs no fence: no claim hands out
-- such a token.
local function fence_out_holder(row)
  local raised = redis.pcall('HINCRBY', row, 'attempts', 1)
  if type(raised) == 'number' then
    redis.call('HINCRBY', row, 'attempts_base', 1)
    redis.call('HSET', row, 'fenced', raised)
  end
end

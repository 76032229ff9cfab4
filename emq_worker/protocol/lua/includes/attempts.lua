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

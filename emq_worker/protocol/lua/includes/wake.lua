-- The wake list p.."wake": one "1" token per parked worker to start, LPUSHed, then trimmed to
-- WAKE_TOKENS_KEPT (the one place the cap is written: every script that wakes includes this).
local WAKE_TOKENS_KEPT = 64

-- wake_tokens(n): min(n, WAKE_TOKENS_KEPT) tokens, to LPUSH in one call.
local function wake_tokens(n)
  local tokens = {}
  for i = 1, math.min(n, WAKE_TOKENS_KEPT) do
    tokens[i] = '1'
  end
  return tokens
end

-- wake(key, n): push up to n wake tokens onto `key` and keep the list at WAKE_TOKENS_KEPT.
local function wake(key, n)
  if n <= 0 then
    return
  end
  redis.call('LPUSH', key, unpack(wake_tokens(n)))
  redis.call('LTRIM', key, 0, WAKE_TOKENS_KEPT - 1)
end

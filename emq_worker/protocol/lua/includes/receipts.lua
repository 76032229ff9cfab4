-- Settle receipts: `<token>:<nonce>:<outcome>` of the holder that settled job `id`, so that a re-sent
-- settle gets 'settled' again (lua/settle.lua writes them; fence.lua's settle_admit reads them). A
-- receipt is the field <the id's last character> of the hash p.."receipts:"..<the id but its last
-- character>: ids minted together (a claim batch, settled together) share all but their last
-- character, so their receipts sit in a few hashes of at most 62 small fields (listpack-encoded,
-- about 35 bytes a receipt) instead of one key each (about 200 bytes with its expiry). A hash lives
-- receipt_ms after its last write (the worker's settle timeout and a margin: the longest a re-send
-- can come after the first sending).
local function receipts_key(p, id)
  return p .. 'receipts:' .. string.sub(id, 1, -2)
end

-- The field of job `id`'s receipt in receipts_key(p, id).
local function receipt_field(id)
  return string.sub(id, -1)
end

-- The receipt of job `id`, or nil.
local function receipt_of(p, id)
  local found = redis.call('HGET', receipts_key(p, id), receipt_field(id))
  return found or nil
end

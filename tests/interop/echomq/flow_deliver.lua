-- EchoMQ's Pump delivery of one completion entry on the parent's queue: counts the child once
-- (HSETNX on :processed), releases at zero without a state check or a wake. A missing parent
-- row gets a :processed, a :dependencies of -1 and a pending member without a row.
-- KEYS[1] = parent :dependencies, KEYS[2] = parent :processed, KEYS[3] = the parent row;
-- ARGV[1] = child id, ARGV[2] = result, ARGV[3] = parent id, ARGV[4] = the parent queue's p.
-- Reply: 1.
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 1 then
  if redis.call('DECR', KEYS[1]) <= 0 then
    redis.call('ZADD', ARGV[4] .. 'pending', 0, ARGV[3])
    redis.call('HSET', KEYS[3], 'state', 'pending')
  end
end
return 1

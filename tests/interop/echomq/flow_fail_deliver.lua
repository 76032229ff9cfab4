-- EchoMQ's Pump delivery of one death entry on the parent's queue: 'fp' fails the parent the
-- first time this child is recorded in :failed; 'id' counts it done the first time it is
-- recorded in :unsuccessful (release without a wake).
-- KEYS[1] = parent :dependencies, KEYS[2] = parent :failed, KEYS[3] = parent :unsuccessful,
-- KEYS[4] = the parent row; ARGV[1] = child id, ARGV[2] = error, ARGV[3] = policy,
-- ARGV[4] = the parent queue's p, ARGV[5] = parent id. Reply: 1.
if ARGV[3] == 'fp' then
  if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 1 then
    redis.call('HSET', KEYS[4], 'state', 'dead')
    redis.call('ZADD', ARGV[4] .. 'dead', 0, ARGV[5])
    redis.call('ZREM', ARGV[4] .. 'pending', ARGV[5])
  end
elseif redis.call('HSETNX', KEYS[3], ARGV[1], ARGV[2]) == 1 then
  if redis.call('DECR', KEYS[1]) <= 0 then
    redis.call('ZADD', ARGV[4] .. 'pending', 0, ARGV[5])
    redis.call('HSET', KEYS[4], 'state', 'pending')
  end
end
return 1

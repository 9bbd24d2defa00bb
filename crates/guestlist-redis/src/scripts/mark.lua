-- Marks a key in flight waited on, so that its answer or release is published.
-- KEYS[1] the key. Returns 1 while the key is in flight.
if redis.call('HEXISTS', KEYS[1], 'locked_until') == 1 then
  redis.call('HSET', KEYS[1], 'waited', '1')
  return 1
end
return 0

-- Stores a response if the attempt still holds the key and nothing is stored yet.
-- KEYS[1] the key; ARGV[1] the attempt's fencing token, ARGV[2] status, ARGV[3] headers, ARGV[4] body,
-- ARGV[5] '1' when the body was too large to store, ARGV[6] the channel that tells the requests
-- of other processes waiting on the key (only when one marked it).
local row = redis.call('HMGET', KEYS[1], 'token', 'status')
if row[1] ~= ARGV[1] or row[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'headers', ARGV[3], 'body', ARGV[4], 'omitted', ARGV[5])
redis.call('HDEL', KEYS[1], 'locked_until')
if redis.call('HEXISTS', KEYS[1], 'waited') == 1 then
  redis.call('PUBLISH', ARGV[6], KEYS[1])
end
return 1

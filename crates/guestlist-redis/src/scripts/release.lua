-- Forgets an in-flight key if the attempt still holds it.
-- KEYS[1] the key; ARGV[1] the attempt's fencing token, ARGV[2] the channel that tells the
-- requests of other processes waiting on the key (only when one marked it).
local row = redis.call('HMGET', KEYS[1], 'token', 'status')
if row[1] ~= ARGV[1] or row[2] then
  return 0
end
local waited = redis.call('HEXISTS', KEYS[1], 'waited')
redis.call('DEL', KEYS[1])
if waited == 1 then
  redis.call('PUBLISH', ARGV[2], KEYS[1])
end
return 1

-- Forgets an in-flight key if the attempt still holds it.
-- KEYS[1] the key; ARGV[1] the attempt's fencing token.
local row = redis.call('HMGET', KEYS[1], 'token', 'status')
if row[1] ~= ARGV[1] or row[2] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1

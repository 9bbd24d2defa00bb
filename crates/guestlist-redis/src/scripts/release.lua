-- Forgets an in-flight key if the attempt still holds it.
-- KEYS[1] the key; ARGV[1] attempt.
local row = redis.call('HMGET', KEYS[1], 'attempt', 'status')
if not row[1] or tonumber(row[1]) ~= tonumber(ARGV[1]) or row[2] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1

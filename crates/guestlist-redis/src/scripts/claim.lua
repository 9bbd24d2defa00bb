-- Claims a key insert-first with a lease, or reports what holds it.
-- KEYS[1] the key; ARGV[1] fingerprint (hex), ARGV[2] lease (ms), ARGV[3] retention (ms),
-- ARGV[4] a new random fencing token.
-- Time comes from Redis itself, so that every instance agrees on when a lease ends.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'fingerprint', ARGV[1], 'attempt', 1, 'token', ARGV[4], 'locked_until', now + lease, 'created_at', now)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'run', 1}
end
local row = redis.call('HMGET', KEYS[1], 'fingerprint', 'status', 'headers', 'body', 'omitted', 'locked_until')
if row[1] ~= ARGV[1] then
  return {'mismatch'}
end
if row[2] then
  return {'replay', row[2], row[3] or '', row[4] or '', row[5] or '0'}
end
local left = tonumber(row[6]) - now
if left > 0 then
  return {'in_flight', left}
end
local attempt = redis.call('HINCRBY', KEYS[1], 'attempt', 1)
redis.call('HSET', KEYS[1], 'token', ARGV[4], 'locked_until', now + lease)
return {'run', attempt}

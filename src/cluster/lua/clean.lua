-- Forgets ban and lift records whose time has passed, a bounded number per call.
-- KEYS[1] bans, KEYS[2] bans:ends, KEYS[3] ranges, KEYS[4] ranges:ends. ARGV[1] most per hash.
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local limit = tonumber(ARGV[1]) or 500
local removed = 0
for i = 1, 3, 2 do
  local ended = redis.call('ZRANGEBYSCORE', KEYS[i + 1], '-inf', ms, 'LIMIT', 0, limit)
  for _, field in ipairs(ended) do
    redis.call('HDEL', KEYS[i], field)
    redis.call('ZREM', KEYS[i + 1], field)
    removed = removed + 1
  end
end
return removed

-- Writes the shared live settings and tells every instance, only if nobody wrote a version
-- since the one the writer last saw (otherwise the writer merges and tries again).
-- KEYS[1] settings (JSON string), KEYS[2] version counter.
-- ARGV[1] the version the writer last saw, ARGV[2] the values (a JSON object),
-- ARGV[3] the writer's instance id (JSON string), ARGV[4] events channel,
-- ARGV[5] 'init' to write only when nothing is stored yet.
-- Returns {1, new version} or {0, the stored settings}.
local stored = redis.call('GET', KEYS[1])
local version = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if stored then
  if ARGV[5] == 'init' or version ~= tonumber(ARGV[1]) then
    return {0, stored}
  end
end
version = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1],
  '{"version":' .. version .. ',"from":' .. ARGV[3] .. ',"values":' .. ARGV[2] .. '}')
redis.call('PUBLISH', ARGV[4],
  '{"kind":"settings","from":' .. ARGV[3] .. ',"version":' .. version .. '}')
return {1, version}

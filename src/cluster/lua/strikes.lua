-- Adds strikes from one instance to every instance's count of each client, and says which
-- clients reached the ban threshold (their count starts afresh: that instance bans them).
-- The count slides as each instance's own does: strikes fall in buckets one window long, and
-- the level is the current bucket plus the previous one weighted by how much of it still lies
-- inside the last window, so a burst across a bucket edge is seen whole.
-- KEYS[i] a client's strikes (HASH start, current, previous). ARGV[1] window (ms),
-- ARGV[2] threshold, ARGV[2 + i] the weight to add to KEYS[i].
-- Returns, per key, the level after adding (rounded down), negated when it reached the
-- threshold.
local window = math.max(tonumber(ARGV[1]) or 60000, 1)
local threshold = math.max(tonumber(ARGV[2]) or 1, 1)
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local totals = {}
for i, key in ipairs(KEYS) do
  local weight = math.max(tonumber(ARGV[2 + i]) or 0, 0)
  -- A count left by an older version (a plain number) starts afresh.
  if redis.call('TYPE', key).ok ~= 'hash' then
    redis.call('DEL', key)
  end
  local state = redis.call('HMGET', key, 'start', 'current', 'previous')
  local start = tonumber(state[1]) or now
  local current = tonumber(state[2]) or 0
  local previous = tonumber(state[3]) or 0
  local elapsed = now - start
  if elapsed >= window then
    local buckets = math.floor(elapsed / window)
    if buckets == 1 then
      previous = current
    else
      previous = 0
    end
    current = 0
    start = start + buckets * window
  end
  current = current + weight
  local into = math.min(math.max(now - start, 0), window)
  -- In whole numbers: previous * (window - into) + current * window >= threshold * window.
  local scaled = previous * (window - into) + current * window
  local level = math.floor(scaled / window)
  if scaled >= threshold * window then
    redis.call('DEL', key)
    totals[i] = -math.max(level, 1)
  else
    redis.call('HSET', key, 'start', start, 'current', current, 'previous', previous)
    -- Nothing of it counts after two windows.
    redis.call('PEXPIRE', key, 2 * window)
    totals[i] = level
  end
end
return totals

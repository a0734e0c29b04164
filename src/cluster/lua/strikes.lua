-- Adds strikes from one instance to every instance's count of each client, and says which
-- clients reached the ban threshold (their count starts afresh: that instance bans them).
-- KEYS[i] a client's strike counter. ARGV[1] window (ms), ARGV[2] threshold,
-- ARGV[2 + i] the weight to add to KEYS[i].
-- Returns, per key, the total after adding, negated when it reached the threshold.
local window = tonumber(ARGV[1])
local threshold = tonumber(ARGV[2])
local totals = {}
for i, key in ipairs(KEYS) do
  local weight = tonumber(ARGV[2 + i]) or 0
  local total = redis.call('INCRBY', key, weight)
  -- The window opens with the first strike of a quiet client.
  if redis.call('PTTL', key) < 0 then
    redis.call('PEXPIRE', key, window)
  end
  if total >= threshold then
    redis.call('DEL', key)
    totals[i] = -total
  else
    totals[i] = total
  end
end
return totals

-- Stores one ban or lift record and tells every instance, unless a later change of the same
-- client or range is already stored (so a change made while this instance was cut off never
-- undoes a newer one).
-- KEYS[1] records hash (bans or ranges), KEYS[2] its end times (zset),
-- KEYS[3] (client bans only) the client's shared strike counter, which a ban starts afresh.
-- ARGV[1] field, ARGV[2] record JSON, ARGV[3] the change's time (unix ms),
-- ARGV[4] when the record may be forgotten (unix ms, 0 = never), ARGV[5] events channel,
-- ARGV[6] message.
local at = tonumber(ARGV[3])
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current then
  local ok, stored = pcall(cjson.decode, current)
  if ok and type(stored) == 'table' and tonumber(stored.at) and tonumber(stored.at) > at then
    return 0
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local ends = tonumber(ARGV[4])
if ends and ends > 0 then
  redis.call('ZADD', KEYS[2], ends, ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
if KEYS[3] then
  redis.call('DEL', KEYS[3])
end
redis.call('PUBLISH', ARGV[5], ARGV[6])
return 1

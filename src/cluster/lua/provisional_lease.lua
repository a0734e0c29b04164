-- A stand-in for the cluster's slot leases (replaced by the lease task). Never grows
-- sum(leases) + reserved past the cap.
-- KEYS: 1 leases, 2 reserved, 3 line.
-- ARGV: 1 "sync" or "step", 2 instance, 3 cap, then
--   sync held: the lease becomes the slots held here (counted even past the cap: they are at
--     the origin), plus one idle slot if the pool has it and nobody waits -> the lease;
--   step returned want: `returned` idle slots left the gate and go back to the pool; with
--     `want` = 1 one idle slot is asked for, granted if the pool has it and nobody waits
--     -> 1 if granted, else 0.
-- Both work on changes the caller already made, so an entry that raised the lease meanwhile
-- (line.lua `arrive`) is never written over.
local leases, reserved, line = KEYS[1], KEYS[2], KEYS[3]
local mode, instance, cap = ARGV[1], ARGV[2], tonumber(ARGV[3]) or 0
local current, all_leased = 0, 0
local all = redis.call('HGETALL', leases)
for i = 1, #all, 2 do
  local held = tonumber(all[i + 1]) or 0
  all_leased = all_leased + held
  if all[i] == instance then
    current = held
  end
end
local in_reserve = tonumber(redis.call('GET', reserved)) or 0
local nobody_waits = redis.call('ZCARD', line) == 0
if mode == 'sync' then
  local held = tonumber(ARGV[4]) or 0
  local grant = held
  if nobody_waits and cap - (all_leased - current) - in_reserve - held >= 1 then
    grant = held + 1
  end
  redis.call('HSET', leases, instance, grant)
  return grant
end
local returned, want = tonumber(ARGV[4]) or 0, tonumber(ARGV[5]) or 0
local lease = math.max(current - returned, 0)
local granted = 0
if want == 1 and nobody_waits and cap - (all_leased - current + lease) - in_reserve >= 1 then
  lease = lease + 1
  granted = 1
end
redis.call('HSET', leases, instance, lease)
return granted

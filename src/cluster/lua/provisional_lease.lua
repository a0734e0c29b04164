-- A stand-in for the cluster's slot leases (replaced by the lease task): this instance's lease
-- becomes the slots it uses, plus one idle slot while nobody waits in the shared line, within
-- what the pool has free. Never grows sum(leases) + reserved past the cap; a lease below the
-- slots in use shrinks the instance's gate (permit debt) instead.
-- KEYS: 1 leases, 2 reserved, 3 line. ARGV: 1 instance, 2 cap, 3 slots in use here.
local leases, reserved, line = KEYS[1], KEYS[2], KEYS[3]
local instance, cap, in_use = ARGV[1], tonumber(ARGV[2]) or 0, tonumber(ARGV[3]) or 0
local others = 0
local all = redis.call('HGETALL', leases)
for i = 1, #all, 2 do
  if all[i] ~= instance then
    others = others + (tonumber(all[i + 1]) or 0)
  end
end
local want = in_use
if redis.call('ZCARD', line) == 0 then
  want = in_use + 1
end
local free = cap - others - (tonumber(redis.call('GET', reserved)) or 0)
local grant = math.max(math.min(want, free), 0)
redis.call('HSET', leases, instance, grant)
return grant

-- One round of an instance's page-slot lease, all at once so no two instances ever see the pool
-- half changed. Times are Redis's own clock (TIME, in ms), so the hosts' clocks never matter.
--
-- KEYS: 1 instances (ZSET id -> membership expiry), 2 leases (HASH id -> slots held),
--       3 wants (HASH id -> slots asked for last), 4 this instance's report (HASH),
--       5 reserved (STRING: slots set aside for visitors called from the line),
--       6 line (ZSET of waiting visitors)
-- ARGV: 1 id, 2 cap, 3 want, 4 returned (slots that already left the instance's gate since it
--       last told the pool), 5 floor (slots the instance may have at the origin now: max(in
--       use, slots its gate holds)), 6 membership TTL ms, 7 key prefix (for the reports of
--       instances that are gone), 8 in use, 9 started (unix ms), 10 address
--
-- Returns {granted, lease, instances, line length, reserved, rejoined (0/1), now ms, limit}.
--
-- The lease only ever changes by deltas: the line's `arrive` raises it by one at any moment
-- (HINCRBY) for a visitor who comes in here, so writing a figure the instance computed from
-- its own, older view would wipe such an entry out. The one absolute write is a rejoin (the
-- pool holds no lease for this instance: first round, taken for dead, or Redis came back
-- empty), where the floor is what the instance holds, and `arrive` lets nobody in on an
-- instance without a lease, so nothing can be lost to it.
--
-- Invariant kept: sum(leases) + reserved <= cap. A rejoin or a cap cut may leave the sum
-- above the cap (those slots are busy at the origin whatever Redis says); meanwhile nothing
-- is granted to anyone.

local instances, leases, wants, own = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local reserved_key, line = KEYS[5], KEYS[6]
local id = ARGV[1]
local function whole(value)
  local n = tonumber(value)
  if n == nil or n ~= n then return 0 end
  return math.max(0, math.floor(n))
end
local cap = whole(ARGV[2])
local want = whole(ARGV[3])
local returned = whole(ARGV[4])
local floor = whole(ARGV[5])
local ttl = math.max(1, whole(ARGV[6]))
local prefix = ARGV[7]

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- Whether the pool still holds this instance's lease: a live membership and a lease entry.
local score = redis.call('ZSCORE', instances, id)
local current = redis.call('HGET', leases, id)
local rejoined = 1
if score and tonumber(score) > now and current then rejoined = 0 end

-- Members whose time ran out are gone: their slots go back to the pool (this instance's too,
-- if it is one of them: it rejoins below).
local gone = redis.call('ZRANGEBYSCORE', instances, '-inf', now)
for _, other in ipairs(gone) do
  redis.call('ZREM', instances, other)
  redis.call('HDEL', leases, other)
  redis.call('HDEL', wants, other)
  redis.call('DEL', prefix .. 'instance:' .. other)
end
redis.call('ZADD', instances, now + ttl, id)

local alive = {}
local members = 0
local listed = redis.call('ZRANGE', instances, 0, -1)
for _, member in ipairs(listed) do
  alive[member] = true
  members = members + 1
end
local asked = {}
local wanted = redis.call('HGETALL', wants)
for i = 1, #wanted, 2 do asked[wanted[i]] = whole(wanted[i + 1]) end

-- An instance below its even share that asks for more is short; anyone above that share then
-- comes down to it (the instance sheds down to `limit`), so the slots move toward where the
-- visitors are.
local fair = math.floor(cap / members)
local others = 0
local short = false
local held = redis.call('HGETALL', leases)
for i = 1, #held, 2 do
  local other, lease = held[i], whole(held[i + 1])
  if other ~= id then
    if alive[other] then
      others = others + lease
      if lease < fair and (asked[other] or 0) > lease then short = true end
    else
      -- A lease without a member belongs to nobody.
      redis.call('HDEL', leases, other)
      redis.call('HDEL', wants, other)
    end
  end
end
local reserved = whole(redis.call('GET', reserved_key))

local lease
if rejoined == 1 then
  lease = floor
else
  lease = math.max(0, whole(current) - returned)
end
local limit = cap
if short then limit = math.min(cap, fair) end
local granted = 0
if want > lease then
  granted = math.min(want - lease, cap - others - reserved - lease, limit - lease)
  granted = math.max(0, granted)
end
lease = lease + granted

redis.call('HSET', leases, id, lease)
redis.call('HSET', wants, id, want)
redis.call('HSET', own, 'in_use', whole(ARGV[8]), 'lease', lease, 'granted', granted,
  'want', want, 'started', ARGV[9], 'address', ARGV[10], 'seen', now)
-- A report outlives its instance only until someone reaps it, or twice the TTL at most.
redis.call('PEXPIRE', own, ttl * 2)

local waiting = redis.call('ZCARD', line)
return {granted, lease, members, waiting, reserved, rejoined, now, limit}

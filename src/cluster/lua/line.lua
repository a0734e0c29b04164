-- The shared line. Every change to it is one run of this script, so it is atomic in Redis:
-- no instance ever reads a figure, decides, and writes it back.
--
-- KEYS: 1 seq, 2 line, 3 seen, 4 called, 5 tickets, 6 per_address, 7 leases, 8 reserved,
--       9 polled, 10 stats, 11 instances (the lease script's members), 12 joined_at, 13 entered.
-- ARGV[1] names the operation: join, poll, arrive, call, leave, undo or reap; the rest are its
-- own.
-- Times are Redis TIME in milliseconds, so the instances' clocks never have to agree.
--
-- line: token -> seq (FIFO by seq). seen: token -> expiry base (a waiting ticket leaves once
-- its score is older than the token lifetime). called: token -> deadline. tickets: token ->
-- "address|issued|instance". per_address: address -> live tickets. polled: token -> last poll.
-- stats: calls (visitors moved from the line to called), entered (called visitors let in).
-- joined_at: instance -> tickets waiting in the line that joined through it (its share).
-- entered: "instance|token" -> when that entry raised the instance's lease (kept a minute, so
-- an instance that never heard the answer can take the slot back: `undo`).

local seq, line, seen, called = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local tickets, per_address, leases, reserved = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local polled, stats, instances, joined_at = KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local entered = KEYS[13]
-- How long an entry can still be taken back by its instance.
local ENTRY_KEPT_MS = 60000

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function number(value)
  return tonumber(value) or 0
end

local function reserved_now()
  return number(redis.call('GET', reserved))
end

local function leased()
  local sum = 0
  for _, held in ipairs(redis.call('HVALS', leases)) do
    sum = sum + number(held)
  end
  return sum
end

-- A ticket that left the line or the called set: its meta, its address's count, its poll time.
local function forget(token)
  local meta = redis.call('HGET', tickets, token)
  if meta then
    local address = string.match(meta, '^([^|]*)|') or ''
    if address ~= '' then
      if redis.call('HINCRBY', per_address, address, -1) <= 0 then
        redis.call('HDEL', per_address, address)
      end
    end
  end
  redis.call('HDEL', tickets, token)
  redis.call('HDEL', polled, token)
end

-- A ticket leaves the waiting line (called, expired, shed or gone): its instance's share drops.
-- Called before `forget`, which drops the meta naming the instance.
local function out_of_line(token)
  local meta = redis.call('HGET', tickets, token)
  local instance = meta and string.match(meta, '|([^|]*)$')
  if instance and instance ~= '' then
    if redis.call('HINCRBY', joined_at, instance, -1) <= 0 then
      redis.call('HDEL', joined_at, instance)
    end
  end
end

-- One slot set aside for a called visitor goes back to the pool (never below zero).
local function unreserve()
  if reserved_now() > 0 then
    redis.call('DECR', reserved)
  end
end

-- A waiting ticket leaves the line for good (expired, shed or given up). True if it was there.
local function drop_waiting(token)
  local was_there = redis.call('ZREM', line, token) == 1
  redis.call('ZREM', seen, token)
  if was_there then
    out_of_line(token)
  end
  forget(token)
  return was_there
end

-- A called ticket leaves the called set (lapsed or given up) and its reserved slot returns to
-- the pool. True if it was there.
local function drop_call(token)
  if redis.call('ZREM', called, token) == 0 then
    return false
  end
  forget(token)
  unreserve()
  return true
end

-- Waiting tickets unseen for the lifetime leave the line; called tickets past their deadline
-- leave and their reserved slot returns to the pool. At most `limit` of each per run.
local function reap(now, ttl, limit)
  local expired = redis.call('ZRANGEBYSCORE', seen, '-inf', now - ttl, 'LIMIT', 0, limit)
  for _, token in ipairs(expired) do
    drop_waiting(token)
  end
  local lapsed = redis.call('ZRANGEBYSCORE', called, '-inf', now, 'LIMIT', 0, limit)
  for _, token in ipairs(lapsed) do
    drop_call(token)
  end
  return #expired, #lapsed
end

local function position(token)
  local rank = redis.call('ZRANK', line, token)
  if not rank then
    return nil
  end
  return rank + 1
end

-- A waiting ticket whose seen score has run out is gone, whether or not the reaper got to it.
local function expired(token, now, ttl)
  local score = redis.call('ZSCORE', seen, token)
  if score and tonumber(score) <= now - ttl then
    drop_waiting(token)
    return true
  end
  return false
end

local op = ARGV[1]

-- join token address max_per_address max_queue instance ttl grace proof
-- -> {position, waiting, called} | {-1} address full | {-2} line full | {-3} token taken
if op == 'join' then
  local token, address = ARGV[2], ARGV[3]
  local max_per_address, max_queue = number(ARGV[4]), number(ARGV[5])
  local instance, ttl, grace, proof = ARGV[6], number(ARGV[7]), number(ARGV[8]), number(ARGV[9])
  local now = now_ms()
  if redis.call('HEXISTS', tickets, token) == 1 then
    return {-3}
  end
  if address ~= '' and max_per_address > 0
      and number(redis.call('HGET', per_address, address)) >= max_per_address then
    return {-1}
  end
  if max_queue > 0 and redis.call('ZCARD', line) >= max_queue then
    -- As the room does: a ticket that never showed itself within the proof window (or was
    -- unseen for nearly its whole lifetime) gives its place to the newcomer; proven ones never.
    local oldest = redis.call('ZRANGE', seen, 0, 0, 'WITHSCORES')
    local shed = false
    if grace > 0 and grace < ttl and #oldest == 2
        and tonumber(oldest[2]) <= now - ttl + grace - proof then
      drop_waiting(oldest[1])
      shed = true
    end
    if not shed then
      return {-2}
    end
  end
  local number_in_line = redis.call('INCR', seq)
  redis.call('ZADD', line, number_in_line, token)
  -- A new ticket must show itself within the first-poll grace: its score starts that much
  -- short of a full lifetime. A poll or a return moves it to now.
  local first = now
  if grace > 0 and grace < ttl then
    first = now - ttl + grace
  end
  redis.call('ZADD', seen, first, token)
  redis.call('HSET', tickets, token, address .. '|' .. now .. '|' .. instance)
  if address ~= '' then
    redis.call('HINCRBY', per_address, address, 1)
  end
  redis.call('HINCRBY', joined_at, instance, 1)
  return {position(token), redis.call('ZCARD', line), redis.call('ZCARD', called)}
end

-- poll token ttl throttle_ms
-- -> {0} called | {1, position, waiting} | {2, position} throttled | {-1} unknown or expired
if op == 'poll' then
  local token, ttl, throttle = ARGV[2], number(ARGV[3]), number(ARGV[4])
  local now = now_ms()
  local deadline = redis.call('ZSCORE', called, token)
  if deadline then
    if tonumber(deadline) > now then
      return {0}
    end
    drop_call(token)
    return {-1}
  end
  if expired(token, now, ttl) then
    return {-1}
  end
  local at = position(token)
  if not at then
    return {-1}
  end
  -- Throttled polls still count as signs of life.
  redis.call('ZADD', seen, 'XX', now, token)
  local last = redis.call('HGET', polled, token)
  if last and now - number(last) < throttle then
    return {2, at}
  end
  redis.call('HSET', polled, token, now)
  return {1, at, redis.call('ZCARD', line)}
end

-- arrive token instance cap ttl: a page request carrying a ticket.
-- -> {0} entered (one reserved slot is now this instance's lease) | {1, position, waiting}
--    | {2} called but no slot to take here now | {-1} unknown or expired
if op == 'arrive' then
  local token, instance, cap, ttl = ARGV[2], ARGV[3], number(ARGV[4]), number(ARGV[5])
  local now = now_ms()
  local deadline = redis.call('ZSCORE', called, token)
  if deadline then
    if tonumber(deadline) <= now then
      drop_call(token)
      return {-1}
    end
    -- Only an instance the pool holds a lease for takes a slot: its lease script may be about
    -- to write its lease afresh (a rejoin), which must not wipe out this entry.
    local member = redis.call('ZSCORE', instances, instance)
    if not member or tonumber(member) <= now or not redis.call('HGET', leases, instance) then
      return {2}
    end
    if reserved_now() > 0 then
      redis.call('DECR', reserved)
    elseif cap - leased() < 1 then
      -- The slot set aside for this visitor is gone (Redis lost it, or an operator cleared
      -- it) and the pool has none: the visitor stays called and tries again.
      return {2}
    end
    redis.call('ZREM', called, token)
    redis.call('HINCRBY', leases, instance, 1)
    redis.call('HINCRBY', stats, 'entered', 1)
    redis.call('ZADD', entered, now, instance .. '|' .. token)
    forget(token)
    return {0}
  end
  if expired(token, now, ttl) then
    return {-1}
  end
  local at = position(token)
  if not at then
    return {-1}
  end
  redis.call('ZADD', seen, 'XX', now, token)
  return {1, at, redis.call('ZCARD', line)}
end

-- call cap window_ms ttl limit instance: the head of the line takes the pool's free slots.
-- -> {called now, waiting, called, free after, calls total, entered total,
--     waiting that joined through `instance`}
if op == 'call' then
  local cap, window, ttl, limit = number(ARGV[2]), number(ARGV[3]), number(ARGV[4]), number(ARGV[5])
  local instance = ARGV[6] or ''
  local now = now_ms()
  reap(now, ttl, limit)
  redis.call('ZREMRANGEBYSCORE', entered, '-inf', now - ENTRY_KEPT_MS)
  local free = cap - leased() - reserved_now()
  local count = 0
  if free > 0 then
    local take = math.min(free, limit)
    local head = redis.call('ZPOPMIN', line, take)
    for i = 1, #head, 2 do
      local token = head[i]
      out_of_line(token)
      redis.call('ZADD', called, now + window, token)
      redis.call('ZREM', seen, token)
      redis.call('HDEL', polled, token)
      count = count + 1
    end
    if count > 0 then
      redis.call('INCRBY', reserved, count)
      redis.call('HINCRBY', stats, 'calls', count)
    end
  end
  return {
    count,
    redis.call('ZCARD', line),
    redis.call('ZCARD', called),
    math.max(free - count, 0),
    number(redis.call('HGET', stats, 'calls')),
    number(redis.call('HGET', stats, 'entered')),
    number(redis.call('HGET', joined_at, instance)),
  }
end

-- leave token...: tickets whose holders are in (let in on an instance's own slot while that
-- instance's figures were behind) or shut out (banned) give up their places, or their calls.
-- -> {left the line, left the called set (their slots back to the pool)}
if op == 'leave' then
  local from_line, from_called = 0, 0
  for i = 2, #ARGV do
    local token = ARGV[i]
    if drop_call(token) then
      from_called = from_called + 1
    elseif drop_waiting(token) then
      from_line = from_line + 1
    end
  end
  return {from_line, from_called}
end

-- undo instance token...: entries whose answers `instance` never heard (the exchange timed
-- out after the script ran). The instance let none of those visitors in on the slot, so each
-- one the pool still counts goes back to it. -> {entries taken back}
if op == 'undo' then
  local instance = ARGV[2]
  local undone = 0
  for i = 3, #ARGV do
    if redis.call('ZREM', entered, instance .. '|' .. ARGV[i]) == 1
        and number(redis.call('HGET', leases, instance)) > 0 then
      redis.call('HINCRBY', leases, instance, -1)
      undone = undone + 1
    end
  end
  return {undone}
end

-- reap ttl limit -> {expired, lapsed}
if op == 'reap' then
  local expired_count, lapsed_count = reap(now_ms(), number(ARGV[2]), number(ARGV[3]))
  return {expired_count, lapsed_count}
end

return redis.error_reply('line.lua: unknown operation ' .. tostring(op))

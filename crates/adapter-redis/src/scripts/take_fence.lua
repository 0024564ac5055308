-- The fence half of every acquire script (acquire, acquire_wait, acquire_marked start
-- with this file). take_fence(lease, ttl, key) hands out the next fence of the
-- counter `key`, called right after `lease` was set for `ttl` ms: one more than the
-- last, and never below the server's clock in milliseconds since the Unix epoch,
-- times 1000. A store that lost its latest writes (an asynchronous replica promoted
-- behind the same address, a restart without persistence) has lost the counter too,
-- but not the clock: its next fence is still above every fence it handed out before,
-- as long as its clock is not behind the lost ones by more than the time the failover
-- took (docs/reliability.md, "Fences across a failover"). Fences of one millisecond
-- count on from its floor (a thousand acquires of one lease in a millisecond would be
-- needed to reach the next).
-- The clock is read as the lease's expiry less its time to live (PEXPIRETIME, an
-- integer: cheaper than TIME's two strings; Redis 7). The counter is raised to the
-- floor only when the clock moved past it, at most once a millisecond.
-- Answers the fence, or an error reply (a fence key of another type or value, a
-- counter at its end): the caller then deletes its lease again, so an error never
-- leaves a lease without a fence.
--
-- TIME before a write needs effects replication: the default since Redis 7; asked
-- for here on older servers (on 7 the call is a no-op).
if redis.replicate_commands then
  redis.replicate_commands()
end
local function take_fence(lease, ttl, key)
  local fence = redis.pcall('INCR', key)
  if type(fence) == 'table' and fence.err then
    if string.find(fence.err, 'not an integer', 1, true) then
      fence.err = 'WRONGTYPE fence key ' .. key .. ' does not hold a counter: ' .. fence.err
    end
    return fence
  end
  local expires = redis.pcall('PEXPIRETIME', lease)
  local ms
  if type(expires) == 'number' then
    ms = expires - tonumber(ttl)
  else
    -- Redis 6.2: no PEXPIRETIME.
    local now = redis.call('TIME')
    ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  end
  -- Below 2^53 until the year 2255: exact in Lua's doubles.
  local floor = ms * 1000
  if fence < floor then
    redis.call('SET', key, string.format('%.0f', floor))
    return floor
  end
  return fence
end

-- The fence half of every acquire script (acquire, acquire_wait, acquire_marked start
-- with this file). take_fence(key) hands out the next fence of the counter `key`:
-- one more than the last, and never below the server's clock in microseconds since
-- the Unix epoch. A store that lost its latest writes (an asynchronous replica
-- promoted behind the same address, a restart without persistence) has lost the
-- counter too, but not the clock: its next fence is still above every fence it
-- handed out before, as long as its clock is not behind the lost ones by more than
-- the time the failover took (docs/reliability.md, "Fences across a failover").
-- Answers the fence, or the error table INCR raised (the caller then deletes its
-- lease again, so an error never leaves a lease without a fence).
--
-- TIME before a write needs effects replication: the default since Redis 7; asked
-- for here on older servers (on 7 the call is a no-op).
if redis.replicate_commands then
  redis.replicate_commands()
end
local function take_fence(key)
  local fence = redis.pcall('INCR', key)
  if not tonumber(fence) then
    if fence.err and string.find(fence.err, 'not an integer', 1, true) then
      fence.err = 'WRONGTYPE fence key ' .. key .. ' does not hold a counter: ' .. fence.err
    end
    return fence
  end
  local now = redis.call('TIME')
  -- Below 2^53 until the year 2255: exact in Lua's doubles.
  local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
  if fence < floor then
    redis.call('SET', key, string.format('%.0f', floor))
    return floor
  end
  return fence
end

-- The fence half of every acquire script (acquire, acquire_wait, acquire_marked start
-- with this file). take_fence(key) hands out the next fence of the counter `key`:
-- one more than the last, and never below the server's clock in microseconds since
-- the Unix epoch. A store that lost its latest writes (an asynchronous replica
-- promoted behind the same address, a restart without persistence) has lost the
-- counter too, but not the clock: its next fence is still above every fence it
-- handed out before, as long as its clock is not behind the lost ones by more than
-- the time the failover took (docs/reliability.md, "Fences across a failover").
-- Answers the fence, or an error reply (a fence key of another type or value, a
-- counter at its end): the caller then deletes its lease again, so an error never
-- leaves a lease without a fence.
--
-- TIME before a write needs effects replication: the default since Redis 7; asked
-- for here on older servers (on 7 the call is a no-op).
if redis.replicate_commands then
  redis.replicate_commands()
end
local function take_fence(key)
  local now = redis.call('TIME')
  -- The clock as a decimal string: the seconds, then the microseconds on six digits.
  local floor = now[1] .. string.sub(now[2] + 1000000, 2)
  -- One command in the usual case: the clock is ahead of the last fence, which the
  -- same SET reads back (fences compare as decimal strings: length, then bytes).
  local last = redis.pcall('SET', key, floor, 'GET')
  if type(last) == 'table' and last.err then
    last.err = 'WRONGTYPE fence key ' .. key .. ' does not hold a counter: ' .. last.err
    return last
  end
  if last then
    if #last > 20 or not string.match(last, '^%d+$') then
      redis.call('SET', key, last)
      return redis.error_reply('WRONGTYPE fence key ' .. key .. ' does not hold a counter')
    end
    if #last > #floor or (#last == #floor and last >= floor) then
      -- The clock is not ahead of the last fence (it went back, or the counter
      -- came from elsewhere): one more than the last.
      redis.call('SET', key, last)
      local fence = redis.pcall('INCR', key)
      if type(fence) == 'table' and fence.err then
        fence.err = 'WRONGTYPE fence key ' .. key .. ' does not hold a counter: ' .. fence.err
      end
      return fence
    end
  end
  -- Below 2^53 until the year 2255: exact in Lua's doubles.
  return tonumber(floor)
end

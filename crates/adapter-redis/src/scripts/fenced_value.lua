-- Fenced write beside a lease, one round trip: set the value only while the fence
-- is the lease's current one (the number its fence key holds), so no write checked
-- before another holder's acquire lands after it.
-- KEYS[1] the lease's fence key; KEYS[2] the value's key, in the lease's hash slot.
-- ARGV[1] the fence (decimal digits, no leading zero); ARGV[2] the value.
-- Returns 1 when written, the current fence as a string ('0' when the lease was
-- never taken) when stale. Fences compare as strings: Lua's numbers are doubles.
local current = redis.call('GET', KEYS[1])
if not current then
  return '0'
end
if current ~= ARGV[1] then
  return current
end
redis.call('SET', KEYS[2], ARGV[2])
return 1

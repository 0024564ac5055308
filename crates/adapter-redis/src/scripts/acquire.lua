-- Single-flight lease acquire, one round trip.
-- KEYS[1] lease key, KEYS[2] fence key (same hash slot)
-- ARGV[1] token, ARGV[2] ttl in milliseconds
-- Returns the fence (an integer) when acquired, {holder_token, pttl} when held.
--
-- When the lease is free: SET NX PX, then take_fence (take_fence.lua: INCR and
-- PEXPIRETIME, a SET at most once a millisecond), answering the fence as a bare
-- integer. When the fence key cannot be incremented, the lease just written is
-- deleted again before the error is returned: the script is atomic, so nobody sees
-- a lease without a fence, and an error never leaves a lease behind. take_fence
-- answers a number or an error table, which `tonumber` tells apart.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = take_fence(KEYS[1], ARGV[2], KEYS[2])
  if not tonumber(fence) then
    redis.call('DEL', KEYS[1])
  end
  return fence
end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}

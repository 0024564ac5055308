-- Single-flight lease acquire, one round trip.
-- KEYS[1] lease key, KEYS[2] fence key (same hash slot)
-- ARGV[1] token, ARGV[2] ttl in milliseconds
-- Returns the fence (an integer) when acquired, {holder_token, pttl} when held.
--
-- Two commands when the lease is free (SET NX PX, INCR), answering the fence as a
-- bare integer. When the fence key cannot be incremented, the lease just written is
-- deleted again before the error is returned: the script is atomic, so nobody sees
-- a lease without a fence, and an error never leaves a lease behind. The INCR
-- answers a number or an error table, which `tonumber` tells apart.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.pcall('INCR', KEYS[2])
  if not tonumber(fence) then
    redis.call('DEL', KEYS[1])
    if fence.err and string.find(fence.err, 'not an integer', 1, true) then
      fence.err = 'WRONGTYPE fence key ' .. KEYS[2] .. ' does not hold a counter: ' .. fence.err
    end
  end
  return fence
end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}

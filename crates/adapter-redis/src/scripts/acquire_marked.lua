-- Owner claim acquire that notes this holder's start (drain marks), one round trip.
-- The acquire of acquire_wait.lua (with a waiter) or acquire.lua (without), plus the
-- start key: on success it holds the token and lives for the marks' time to live, so
-- its PTTL later tells, on the server's clock, how long ago the claim was taken.
-- KEYS[1] claim key, KEYS[2] fence key, KEYS[3] waiter list, KEYS[4] start key (one
-- hash slot)
-- ARGV[1] token, ARGV[2] claim TTL in ms, ARGV[3] this instance's wake channel ('' for
-- none), ARGV[4] waiter registration TTL in ms, ARGV[5] the marks' TTL in ms
-- Returns the fence (an integer) when acquired, {holder_token, pttl} when held.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = take_fence(KEYS[1], ARGV[2], KEYS[2])
  if not tonumber(fence) then
    redis.call('DEL', KEYS[1])
    return fence
  end
  if ARGV[3] ~= '' then
    redis.call('LREM', KEYS[3], 0, ARGV[3])
  end
  redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[5])
  return fence
end
if ARGV[3] ~= '' then
  redis.call('LREM', KEYS[3], 0, ARGV[3])
  redis.call('RPUSH', KEYS[3], ARGV[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}

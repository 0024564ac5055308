-- Owner claim acquire that registers a waiter when it loses (release wake-up), one
-- round trip. The acquire of acquire.lua, plus the waiter list.
-- KEYS[1] claim key, KEYS[2] fence key, KEYS[3] waiter list (one hash slot)
-- ARGV[1] token, ARGV[2] claim TTL in ms, ARGV[3] this instance's wake channel,
-- ARGV[4] waiter registration TTL in ms
-- Returns the fence (an integer) when acquired, {holder_token, pttl} when held.
-- Held: the channel goes to the tail of the waiter list (once) and the list's TTL is
-- renewed. Acquired: the channel leaves the list (a registration this instance no
-- longer needs must not take a wake from another waiter).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = take_fence(KEYS[1], ARGV[2], KEYS[2])
  if not tonumber(fence) then
    redis.call('DEL', KEYS[1])
    return fence
  end
  redis.call('LREM', KEYS[3], 0, ARGV[3])
  return fence
end
redis.call('LREM', KEYS[3], 0, ARGV[3])
redis.call('RPUSH', KEYS[3], ARGV[3])
redis.call('PEXPIRE', KEYS[3], ARGV[4])
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}

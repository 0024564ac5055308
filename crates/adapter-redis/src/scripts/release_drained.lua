-- Owner claim release that publishes the drain mark (drain marks), one round trip.
-- Compare-and-delete as release.lua. When the start key holds this token (the claim
-- was taken by acquire_marked.lua) it is deleted, and with ARGV[5] = '1' (the turn
-- left nothing behind) its time left becomes the mark's: the mark key then expires
-- the marks' TTL after the claim was taken, so its PTTL tells how long ago that was.
-- A later start never gives way to an earlier one (the larger time left wins). Then,
-- when asked, one waiter is woken (wake_one.lua, appended to this script).
-- KEYS[1] claim key, KEYS[2] waiter list, KEYS[3] start key, KEYS[4] mark key (one
-- hash slot)
-- ARGV[1] token, ARGV[2] owner name (the message), ARGV[3] waiters to try (0: wake
-- nobody), ARGV[4] '1' when PUBLISH's count is the whole server's (standalone),
-- ARGV[5] '1' when the turn drained the owner
-- Returns {1, woke} when released, {0, 0} when the claim was not ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0, 0}
end
redis.call('DEL', KEYS[1])
if redis.call('GET', KEYS[3]) == ARGV[1] then
  local left = redis.call('PTTL', KEYS[3])
  redis.call('DEL', KEYS[3])
  if ARGV[5] == '1' and left > 0 and left > redis.call('PTTL', KEYS[4]) then
    redis.call('SET', KEYS[4], '1', 'PX', left)
  end
end

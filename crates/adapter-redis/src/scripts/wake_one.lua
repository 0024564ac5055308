-- The end of release_wake.lua and release_drained.lua (appended to each at build
-- time): wake one waiter of the released claim. KEYS[2] waiter list; ARGV[2] owner
-- name, ARGV[3] waiters to try, ARGV[4] '1' when PUBLISH's count is the whole server's.
local tries = tonumber(ARGV[3])
while tries > 0 do
  local channel = redis.call('LPOP', KEYS[2])
  if not channel then
    break
  end
  tries = tries - 1
  if redis.call('PUBLISH', channel, ARGV[2]) > 0 or ARGV[4] ~= '1' then
    return {1, 1}
  end
end
return {1, 0}

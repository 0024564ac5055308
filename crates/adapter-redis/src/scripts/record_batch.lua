-- Record an owner's batch as processed, one round trip. KEYS[1] the owner's
-- in-flight list, KEYS[2] its processed hash (one hash slot); ARGV the items.
-- Every item still in the in-flight list is counted once in the hash
-- (HINCRBY item 1) and leaves the list, in the same step; an item no longer there
-- (another holder took the batch over and recorded it) is not counted again.
-- Returns how many items were recorded.
--
-- Items are counted before they leave the list, and on Redis 7 every right is
-- checked first, so a missing one fails the call with nothing changed: an item is
-- never gone from the list without being counted.
if redis.acl_check_cmd then
  local checks = {{'lrange', KEYS[1], '0', '-1'}, {'hincrby', KEYS[2], 'x', '1'}, {'del', KEYS[1]}, {'rpush', KEYS[1], 'x'}}
  for _, c in ipairs(checks) do
    if not redis.acl_check_cmd(unpack(c)) then
      return redis.error_reply("NOPERM User has no permissions to run the '" .. c[1] .. "' command")
    end
  end
end
local held = redis.call('LRANGE', KEYS[1], 0, -1)
if #held == 0 then
  return 0
end
local left = {}
for _, v in ipairs(held) do
  left[v] = (left[v] or 0) + 1
end
local recorded = 0
for _, item in ipairs(ARGV) do
  if (left[item] or 0) > 0 then
    left[item] = left[item] - 1
    redis.call('HINCRBY', KEYS[2], item, 1)
    recorded = recorded + 1
  end
end
if recorded == 0 then
  return 0
end
-- Keep what was not recorded (items of another turn), in order.
local rest = {}
for _, v in ipairs(held) do
  if (left[v] or 0) > 0 then
    left[v] = left[v] - 1
    rest[#rest + 1] = v
  end
end
redis.call('DEL', KEYS[1])
for i = 1, #rest, 1000 do
  redis.call('RPUSH', KEYS[1], unpack(rest, i, math.min(i + 999, #rest)))
end
return recorded

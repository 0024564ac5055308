-- An owner's next batch, one round trip. KEYS[1] the owner's backlog list, KEYS[2]
-- its in-flight list (one hash slot); ARGV[1] how many items at most.
-- Returns {recovered, item...}: recovered = 1 and the in-flight list's items when it
-- holds any (a turn that died, or failed, before recording them: they are the batch
-- again), otherwise recovered = 0 and up to ARGV[1] items moved from the head of the
-- backlog to the in-flight list.
--
-- Nothing leaves the backlog before it is in the in-flight list: the items are
-- copied (RPUSH) before they are trimmed (LTRIM), and on Redis 7 every right is
-- checked first, so a missing one fails the call with nothing changed.
if redis.acl_check_cmd then
  for _, c in ipairs({{'lrange', KEYS[2], '0', '-1'}, {'rpush', KEYS[2], 'x'}, {'ltrim', KEYS[1], '0', '-1'}}) do
    if not redis.acl_check_cmd(unpack(c)) then
      return redis.error_reply("NOPERM User has no permissions to run the '" .. c[1] .. "' command")
    end
  end
end
local held = redis.call('LRANGE', KEYS[2], 0, -1)
if #held > 0 then
  table.insert(held, 1, 1)
  return held
end
local n = tonumber(ARGV[1])
local items = redis.call('LRANGE', KEYS[1], 0, n - 1)
if #items == 0 then
  return {0}
end
-- unpack() is bounded by Lua's stack: push in chunks.
for i = 1, #items, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(items, i, math.min(i + 999, #items)))
end
redis.call('LTRIM', KEYS[1], #items, -1)
table.insert(items, 1, 0)
return items

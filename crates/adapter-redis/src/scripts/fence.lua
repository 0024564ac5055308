-- Fenced write, one round trip: apply the write only when the fence is not below
-- the resource's mark, then raise the mark to the fence.
-- KEYS[1] the mark; KEYS[2] the key written (none for a bare admit), in the mark's
-- hash slot.
-- ARGV[1] the fence (decimal digits, no leading zero); ARGV[2] the write: 'admit'
-- (none), 'set' (ARGV[3] value, ARGV[4] PX milliseconds or '0' for none), 'hset'
-- (ARGV[3..] field, value pairs) or 'del'.
-- Returns 1 when accepted (and written), the mark as a string when stale.
--
-- Fences are compared as decimal strings (length, then bytes): Lua's numbers are
-- doubles, which cannot tell 2^53 from 2^53 + 1. The write comes before the mark is
-- raised, so a write that fails (a key of another type) raises nothing.
local fence = ARGV[1]
local mark = redis.call('GET', KEYS[1])
if mark then
  if #mark > 20 or not string.match(mark, '^%d+$') or (#mark > 1 and string.byte(mark, 1) == 48) then
    return redis.error_reply('WRONGTYPE fence mark ' .. KEYS[1] .. ' does not hold a fence')
  end
  if #mark > #fence or (#mark == #fence and mark > fence) then
    return mark
  end
end
local write = ARGV[2]
if write == 'set' then
  if ARGV[4] == '0' then
    redis.call('SET', KEYS[2], ARGV[3])
  else
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
  end
elseif write == 'hset' then
  redis.call('HSET', KEYS[2], unpack(ARGV, 3))
elseif write == 'del' then
  redis.call('DEL', KEYS[2])
end
if mark ~= fence then
  redis.call('SET', KEYS[1], fence)
end
return 1

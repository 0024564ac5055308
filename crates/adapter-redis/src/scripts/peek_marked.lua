-- Batched peek with drain marks, one round trip for K owners (per hash slot on a
-- Cluster); with a wake channel it registers it on every held claim as
-- peek_wait.lua does.
-- KEYS: claim_1, waiters_1, mark_1, claim_2, ... (each triple in one hash slot)
-- ARGV[1] this instance's wake channel ('' for none), ARGV[2] waiter registration TTL
-- in ms, ARGV[3] the marks' TTL in ms
-- Returns {value_1, pttl_1, age_1, value_2, ...}: the claim's value (nil when free)
-- and PTTL, and how many ms ago the owner's latest drained turn took its claim (the
-- marks' TTL less the mark key's PTTL; -1 without a mark).
local out = {}
for i = 1, #KEYS, 3 do
  local value = redis.call('GET', KEYS[i])
  if value then
    out[#out + 1] = value
    out[#out + 1] = redis.call('PTTL', KEYS[i])
    if ARGV[1] ~= '' then
      redis.call('LREM', KEYS[i + 1], 0, ARGV[1])
      redis.call('RPUSH', KEYS[i + 1], ARGV[1])
      redis.call('PEXPIRE', KEYS[i + 1], ARGV[2])
    end
  else
    out[#out + 1] = false
    out[#out + 1] = -2
  end
  local left = redis.call('PTTL', KEYS[i + 2])
  if left > 0 then
    out[#out + 1] = tonumber(ARGV[3]) - left
  else
    out[#out + 1] = -1
  end
end
return out

-- Batched peek that registers a waiter on every held claim (release wake-up), one
-- round trip for K owners (per hash slot on a Cluster).
-- KEYS: claim_1, waiters_1, claim_2, waiters_2, ... (each pair in one hash slot)
-- ARGV[1] this instance's wake channel, ARGV[2] waiter registration TTL in ms
-- Returns {value_1, pttl_1, value_2, pttl_2, ...}: the claim's value (nil when free)
-- and PTTL, as the GET + PTTL pipeline of a plain peek.
-- A held claim puts the channel at the tail of the owner's waiter list (once: an
-- earlier registration is removed first) and renews the list's TTL.
local out = {}
for i = 1, #KEYS, 2 do
  local value = redis.call('GET', KEYS[i])
  if value then
    out[#out + 1] = value
    out[#out + 1] = redis.call('PTTL', KEYS[i])
    redis.call('LREM', KEYS[i + 1], 0, ARGV[1])
    redis.call('RPUSH', KEYS[i + 1], ARGV[1])
    redis.call('PEXPIRE', KEYS[i + 1], ARGV[2])
  else
    out[#out + 1] = false
    out[#out + 1] = -2
  end
end
return out

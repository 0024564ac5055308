-- Settle our claims of one batch, one round trip per hash slot.
-- KEYS: the claim keys (one hash slot); ARGV[1] token, ARGV[2] done ttl in ms,
-- ARGV[2 + i] the action for KEYS[i]: 'd' mark done, 'r' release.
-- Returns, per key in order: 1 when settled, 0 when the key no longer holds
-- `pending:<token>` (nothing changed).
local mine = 'pending:' .. ARGV[1]
local done = 'done:' .. ARGV[1]
local current = {}
for _, key in ipairs(KEYS) do
  current[key] = redis.call('GET', key)
end
local out = {}
for i, key in ipairs(KEYS) do
  if current[key] == mine then
    if ARGV[2 + i] == 'd' then
      redis.call('SET', key, done, 'PX', ARGV[2])
      current[key] = done
    else
      redis.call('DEL', key)
      current[key] = false
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out

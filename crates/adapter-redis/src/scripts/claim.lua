-- Per-message claims of one batch, one round trip per hash slot.
-- KEYS: the claim keys (one hash slot); ARGV[1] token, ARGV[2] pending ttl in ms.
-- Returns, per key in order: 1 when claimed now (`pending:<token>` written),
-- otherwise the value found (`done:…` or another holder's `pending:…`).
--
-- Every key is read before anything is written, so a key of the wrong type
-- (WRONGTYPE) fails the whole call and leaves nothing half-claimed. A key
-- repeated in the batch is claimed once: later copies see our own claim.
local mine = 'pending:' .. ARGV[1]
local current = {}
for _, key in ipairs(KEYS) do
  current[key] = redis.call('GET', key)
end
local out = {}
for i, key in ipairs(KEYS) do
  local value = current[key]
  if value then
    out[i] = value
  else
    redis.call('SET', key, mine, 'PX', ARGV[2])
    current[key] = mine
    out[i] = 1
  end
end
return out

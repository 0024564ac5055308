-- Per-message claims, one round trip per hash slot: settle some of our pending
-- claims, then take others. `claim_batch` sends only claims, `settle_batch` only
-- settlements, and the tick's call per batch both: the batch before's settlements,
-- then this batch's claims.
-- KEYS[1..n]: the claim keys to settle; KEYS[n+1..]: the claim keys to take (one
-- hash slot: a queue's claim keys share its hash tag).
-- ARGV[1] token, ARGV[2] done ttl in ms, ARGV[3] pending ttl in ms, ARGV[4] n,
-- ARGV[4 + i] the action for KEYS[i]: 'd' mark done, 'r' release.
-- Returns {settled, claimed}: per key settled, 1 when settled and 0 when it no longer
-- holds `pending:<token>` (nothing changed); per key taken, 1 when claimed now
-- (`pending:<token>` written) and otherwise the value found (`done:…` or a
-- `pending:…`). The claims see the settlements: a message released here is free to
-- claim, one marked done answers `done:…`; a key repeated among the claims is
-- claimed once (later copies see our own claim).
--
-- Every key is read before anything is written, so a key of the wrong type
-- (WRONGTYPE) fails the whole call and leaves nothing half-done.
local n = tonumber(ARGV[4])
local mine = 'pending:' .. ARGV[1]
local done = 'done:' .. ARGV[1]
local current = {}
for _, key in ipairs(KEYS) do
  current[key] = redis.call('GET', key)
end
local settled = {}
for i = 1, n do
  local key = KEYS[i]
  if current[key] == mine then
    if ARGV[4 + i] == 'd' then
      redis.call('SET', key, done, 'PX', ARGV[2])
      current[key] = done
    else
      redis.call('DEL', key)
      current[key] = false
    end
    settled[i] = 1
  else
    settled[i] = 0
  end
end
local claimed = {}
for i = n + 1, #KEYS do
  local key = KEYS[i]
  local value = current[key]
  if value then
    claimed[i - n] = value
  else
    redis.call('SET', key, mine, 'PX', ARGV[3])
    current[key] = mine
    claimed[i - n] = 1
  end
end
return {settled, claimed}

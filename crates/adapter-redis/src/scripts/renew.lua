-- Lease renewal, compare-and-PEXPIRE: extend the lease only while it holds our token.
-- KEYS[1] lease key; ARGV[1] token, ARGV[2] ttl in milliseconds.
-- Returns 1 when renewed, 0 when the lease is gone or foreign.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0

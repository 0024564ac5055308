-- Lease release, compare-and-delete: delete the lease only while it holds our token.
-- KEYS[1] lease key; ARGV[1] token. Returns 1 when deleted, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0

-- Owner claim release that wakes ONE waiter (release wake-up), one round trip.
-- Compare-and-delete as release.lua; then, when asked (wake_one.lua, appended to this
-- script), pop the oldest waiter's wake channel and PUBLISH the owner on it: one
-- waiter, so nobody herds.
-- KEYS[1] claim key, KEYS[2] waiter list (one hash slot)
-- ARGV[1] token, ARGV[2] owner name (the message), ARGV[3] waiters to try (0: wake
-- nobody), ARGV[4] '1' when PUBLISH's count is the whole server's (standalone): then
-- a waiter nobody listens on (a dead instance) is skipped for the next one. On a
-- Cluster ('0') PUBLISH counts only the node's own clients, so the first is final.
-- Returns {1, woke} when released (woke: 1 when a waiter was notified), {0, 0} when
-- the claim was not ours (nobody is woken: the claim is not free).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0, 0}
end
redis.call('DEL', KEYS[1])

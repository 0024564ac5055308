-- One turn's work: do the next batch of one tenant's jobs (here: mark them done).
-- $1 tenant, $2 instance, $3 the fence of the tenant's claim, $4 batch size. It runs
-- inside PostgresStore::fenced, so it commits only while $3 is the claim's current
-- fence. Nothing here locks the batch: the claim is what keeps two turns off one tenant.
WITH batch AS (
    SELECT id FROM jobs WHERE tenant = $1 AND done_by IS NULL ORDER BY id LIMIT $4
)
UPDATE jobs SET done_by = $2, done_fence = $3, done_count = jobs.done_count + 1
FROM batch
WHERE jobs.id = batch.id

-- tenant-drains' table: the embedder's own work, one row per job, each of one tenant.
-- Run once before the program (psql -f examples/sql/jobs.sql); the program only reads
-- and updates it.
CREATE TABLE IF NOT EXISTS jobs (
    id bigserial PRIMARY KEY,
    tenant text NOT NULL,
    -- The instance that did the job and the fence of the tenant's claim it held then;
    -- NULL while the job is to do.
    done_by text,
    done_fence bigint,
    -- How many times the job was done: exactly once is 1.
    done_count integer NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_to_do ON jobs (tenant, id) WHERE done_by IS NULL;

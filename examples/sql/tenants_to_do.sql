-- One pass: every tenant with a job to do.
SELECT DISTINCT tenant FROM jobs WHERE done_by IS NULL ORDER BY tenant

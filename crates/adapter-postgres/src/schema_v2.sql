-- drain's schema, version 2: fences checked where the writes land. Runs after
-- schema_v1.sql, idempotent like it (a version 1 schema is upgraded by running both
-- again). `@SCHEMA@` is replaced by the configured schema name.

-- The highest fence each resource accepted (admit_fence): a resource that is not a
-- table beside drain's lease rows refuses writers below its mark. Rows stay for good.
CREATE TABLE IF NOT EXISTS @SCHEMA@.fence_marks (
    prefix text NOT NULL,
    resource text NOT NULL,
    mark bigint NOT NULL,
    PRIMARY KEY (prefix, resource)
);

INSERT INTO @SCHEMA@.schema_version (version) VALUES (2) ON CONFLICT DO NOTHING;

-- The lease's last fence (NULL when it was never taken), its row held FOR SHARE
-- until the caller's transaction ends: an acquire, which updates the row, waits
-- until then, so no larger fence is handed out while the caller writes. Call it
-- inside your own transaction, before your writes. A renew or release of the lease
-- waits for the transaction too: keep it short.
CREATE OR REPLACE FUNCTION @SCHEMA@.current_fence(p_prefix text, p_kind text, p_name text) RETURNS bigint
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
    SELECT l.fence FROM leases l
    WHERE l.prefix = p_prefix AND l.kind = p_kind AND l.name = p_name
    FOR SHARE
$$;

-- True while p_fence is the lease's current fence: no larger one has been handed
-- out (the lease may have expired or been released since; nobody acquired it
-- again). Holds the answer until the caller's transaction ends, as current_fence.
CREATE OR REPLACE FUNCTION @SCHEMA@.fence_is_current(p_prefix text, p_kind text, p_name text, p_fence bigint)
RETURNS boolean
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$ SELECT coalesce(current_fence(p_prefix, p_kind, p_name) = p_fence, false) $$;

-- Admit p_fence to p_resource's mark: accepted (and the mark raised to it) when it
-- is not below the mark, otherwise refused with the mark. The mark's row stays
-- locked until the caller's transaction ends, so writes admitted by it in one
-- transaction are not overtaken by a lower fence.
CREATE OR REPLACE FUNCTION @SCHEMA@.admit_fence(p_prefix text, p_resource text, p_fence bigint,
    OUT accepted boolean, OUT mark bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
BEGIN
    INSERT INTO fence_marks AS m (prefix, resource, mark) VALUES (p_prefix, p_resource, p_fence)
    ON CONFLICT (prefix, resource) DO UPDATE SET mark = excluded.mark WHERE m.mark <= excluded.mark
    RETURNING m.mark INTO admit_fence.mark;
    IF FOUND THEN
        accepted := true;
        RETURN;
    END IF;
    -- The conflicting row is locked by the upsert: its mark is above p_fence.
    SELECT m.mark INTO admit_fence.mark FROM fence_marks m
    WHERE m.prefix = p_prefix AND m.resource = p_resource;
    accepted := false;
END
$$;

-- Only the roles granted EXECUTE (see grant_sql) may run drain's functions.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA @SCHEMA@ FROM PUBLIC;

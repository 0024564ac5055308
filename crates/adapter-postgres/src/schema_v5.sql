-- drain's schema, version 5: fences across a failover. Runs after the versions
-- before it, idempotent like them. `@SCHEMA@` is replaced by the configured schema
-- name.
--
-- A lease's next fence is one more than its last, and never below the server's
-- clock in microseconds since the Unix epoch. A promoted asynchronous standby that
-- lost the latest commits has lost their fences too, but not the clock: its next
-- fence is still above every fence handed out before, as long as its clock is not
-- behind the lost ones by more than the failover took (docs/reliability.md,
-- "Fences across a failover").

INSERT INTO @SCHEMA@.schema_version (version) VALUES (5) ON CONFLICT DO NOTHING;

CREATE OR REPLACE FUNCTION @SCHEMA@.next_fence(p_last bigint) RETURNS bigint
LANGUAGE sql VOLATILE SET search_path = @SCHEMA@, pg_temp
AS $$ SELECT greatest(coalesce(p_last, 0) + 1, floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint) $$;

-- acquire of version 1, its fences from next_fence.
CREATE OR REPLACE FUNCTION @SCHEMA@.acquire(
    p_prefix text, p_kind text, p_name text, p_token text, p_holder text, p_ttl_us bigint,
    OUT acquired boolean, OUT fence bigint, OUT holder text, OUT remaining_us bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
BEGIN
    FOR attempt IN 1..10 LOOP
        INSERT INTO leases AS l (prefix, kind, name, token, holder, expires_at, fence)
        VALUES (p_prefix, p_kind, p_name, p_token, p_holder,
                clock_timestamp() + make_interval(secs => p_ttl_us / 1000000.0), next_fence(NULL))
        ON CONFLICT (prefix, kind, name) DO UPDATE
            SET token = excluded.token, holder = excluded.holder,
                expires_at = excluded.expires_at, fence = next_fence(l.fence)
            WHERE l.token IS NULL OR l.expires_at <= clock_timestamp()
        RETURNING l.fence INTO acquire.fence;
        IF FOUND THEN
            acquired := true;
            RETURN;
        END IF;
        -- Held a moment ago: read the holder (the row is ours to read until a
        -- concurrent release or expiry frees it; then try again).
        SELECT l.holder, micros_until(l.expires_at) INTO acquire.holder, acquire.remaining_us
        FROM leases l
        WHERE l.prefix = p_prefix AND l.kind = p_kind AND l.name = p_name AND l.token IS NOT NULL;
        IF FOUND AND acquire.remaining_us > 0 THEN
            acquired := false;
            fence := NULL;
            RETURN;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'the lease % % changed hands ten times during one acquire', p_kind, p_name
        USING ERRCODE = '40001';
END
$$;

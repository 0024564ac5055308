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

-- release_and_wake of version 1, waking the oldest waiter that still listens. A
-- waiter's wake connection names its channel as its application_name (src/releases.rs),
-- so a registration whose instance has no such connection (it exited, or its
-- connection broke) is dropped instead of taking the wake-up a live waiter needs.
CREATE OR REPLACE FUNCTION @SCHEMA@.release_and_wake(p_prefix text, p_name text, p_token text, p_wake boolean,
    OUT released boolean, OUT woke boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
DECLARE
    target text;
BEGIN
    released := release(p_prefix, 'owner', p_name, p_token);
    woke := false;
    IF released AND p_wake THEN
        DELETE FROM waiters w
        WHERE w.prefix = p_prefix AND w.owner = p_name
          AND (w.expires_at <= clock_timestamp()
               OR NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                              WHERE a.application_name = wake_channel(p_prefix, w.instance)));
        DELETE FROM waiters w
        WHERE (w.prefix, w.owner, w.instance) IN (
            SELECT o.prefix, o.owner, o.instance FROM waiters o
            WHERE o.prefix = p_prefix AND o.owner = p_name
            ORDER BY o.seq LIMIT 1 FOR UPDATE)
        RETURNING w.instance INTO target;
        IF target IS NOT NULL THEN
            PERFORM pg_notify(wake_channel(p_prefix, target), p_name);
            woke := true;
        END IF;
    END IF;
END
$$;

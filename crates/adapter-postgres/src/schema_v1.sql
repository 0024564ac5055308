-- drain's schema, version 1. `@SCHEMA@` is replaced by the configured schema name.
-- Idempotent: every statement may run again on a database that has it. Run under
-- pg_advisory_xact_lock by the store (two stores creating it at once wait for each
-- other), or by hand as a role that may create the schema (`drain doctor` prints it).
--
-- Every operation is one function, SECURITY DEFINER with a fixed search_path, so a
-- role that may only EXECUTE these functions (and USE the schema) can run drain.
-- Time is the server's: clock_timestamp(), never the client's.

CREATE SCHEMA IF NOT EXISTS @SCHEMA@;

CREATE TABLE IF NOT EXISTS @SCHEMA@.schema_version (
    version int PRIMARY KEY,
    installed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- One row per lease ever taken. The row stays when the lease is released or
-- expires (holder NULL or expires_at past): its fence only grows, across release,
-- expiry and server restarts.
CREATE TABLE IF NOT EXISTS @SCHEMA@.leases (
    prefix text NOT NULL,
    kind text NOT NULL,
    name text NOT NULL,
    token text,
    holder text,
    expires_at timestamptz,
    fence bigint NOT NULL,
    PRIMARY KEY (prefix, kind, name)
);

-- Per-message claims: pending (a holder's submit) or done (the dedup window) until
-- expires_at; a row past it is free.
CREATE TABLE IF NOT EXISTS @SCHEMA@.claims (
    prefix text NOT NULL,
    queue text NOT NULL,
    id_type text NOT NULL,
    id bytea NOT NULL,
    done boolean NOT NULL,
    token text,
    holder text,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (prefix, queue, id_type, id)
);

-- Instances waiting for an owner's claim to be released, oldest first by seq.
CREATE SEQUENCE IF NOT EXISTS @SCHEMA@.waiter_seq;
CREATE TABLE IF NOT EXISTS @SCHEMA@.waiters (
    prefix text NOT NULL,
    owner text NOT NULL,
    instance text NOT NULL,
    seq bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (prefix, owner, instance)
);

INSERT INTO @SCHEMA@.schema_version (version) VALUES (1) ON CONFLICT DO NOTHING;

CREATE OR REPLACE FUNCTION @SCHEMA@.schema_version() RETURNS int
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$ SELECT max(version) FROM schema_version $$;

-- Microseconds from now to `t`.
CREATE OR REPLACE FUNCTION @SCHEMA@.micros_until(t timestamptz) RETURNS bigint
LANGUAGE sql VOLATILE SET search_path = @SCHEMA@, pg_temp
AS $$ SELECT floor(extract(epoch FROM (t - clock_timestamp())) * 1000000)::bigint $$;

-- The channel an instance LISTENs on for its wake-ups (an identifier of 38 bytes
-- whatever the prefix and instance hold).
CREATE OR REPLACE FUNCTION @SCHEMA@.wake_channel(p_prefix text, p_instance text) RETURNS text
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$ SELECT 'drain_' || md5(p_prefix || chr(1) || p_instance) $$;

-- Take the lease if it is free. acquired: fence is ours; otherwise holder and
-- remaining_us are the holder's.
CREATE OR REPLACE FUNCTION @SCHEMA@.acquire(
    p_prefix text, p_kind text, p_name text, p_token text, p_holder text, p_ttl_us bigint,
    OUT acquired boolean, OUT fence bigint, OUT holder text, OUT remaining_us bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
BEGIN
    FOR attempt IN 1..10 LOOP
        INSERT INTO leases AS l (prefix, kind, name, token, holder, expires_at, fence)
        VALUES (p_prefix, p_kind, p_name, p_token, p_holder,
                clock_timestamp() + make_interval(secs => p_ttl_us / 1000000.0), 1)
        ON CONFLICT (prefix, kind, name) DO UPDATE
            SET token = excluded.token, holder = excluded.holder,
                expires_at = excluded.expires_at, fence = l.fence + 1
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

-- Compare-and-free: true when our unexpired lease was released.
CREATE OR REPLACE FUNCTION @SCHEMA@.release(p_prefix text, p_kind text, p_name text, p_token text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
BEGIN
    UPDATE leases SET token = NULL, holder = NULL, expires_at = NULL
    WHERE prefix = p_prefix AND kind = p_kind AND name = p_name
      AND token = p_token AND expires_at > clock_timestamp();
    RETURN FOUND;
END
$$;

-- Compare-and-extend: true when our unexpired lease now expires ttl from now.
CREATE OR REPLACE FUNCTION @SCHEMA@.renew(p_prefix text, p_kind text, p_name text, p_token text, p_ttl_us bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
BEGIN
    UPDATE leases SET expires_at = clock_timestamp() + make_interval(secs => p_ttl_us / 1000000.0)
    WHERE prefix = p_prefix AND kind = p_kind AND name = p_name
      AND token = p_token AND expires_at > clock_timestamp();
    RETURN FOUND;
END
$$;

-- The holder of a held lease; no row when it is free.
CREATE OR REPLACE FUNCTION @SCHEMA@.peek(p_prefix text, p_kind text, p_name text)
RETURNS TABLE (holder text, remaining_us bigint, fence bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
    SELECT * FROM (
        SELECT l.holder, micros_until(l.expires_at) AS remaining_us, l.fence
        FROM leases l
        WHERE l.prefix = p_prefix AND l.kind = p_kind AND l.name = p_name AND l.token IS NOT NULL
    ) held WHERE held.remaining_us > 0
$$;

-- Owner leases, one row per name in order: holder NULL when free.
CREATE OR REPLACE FUNCTION @SCHEMA@.peek_owners(p_prefix text, p_names text[])
RETURNS TABLE (ord bigint, holder text, remaining_us bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
    SELECT n.ord,
           CASE WHEN h.remaining_us > 0 THEN h.holder END,
           CASE WHEN h.remaining_us > 0 THEN h.remaining_us END
    FROM unnest(p_names) WITH ORDINALITY AS n(name, ord)
    LEFT JOIN LATERAL (
        SELECT l.holder, micros_until(l.expires_at) AS remaining_us
        FROM leases l
        WHERE l.prefix = p_prefix AND l.kind = 'owner' AND l.name = n.name AND l.token IS NOT NULL
    ) h ON true
    ORDER BY n.ord
$$;

-- Claim a batch of one queue: one state per id, in order ('claimed', 'done' or
-- 'pending' with its holder). Rows are locked in id order, so batches that share
-- ids never deadlock.
CREATE OR REPLACE FUNCTION @SCHEMA@.claim_batch(
    p_prefix text, p_queue text, p_types text[], p_ids bytea[], p_token text, p_holder text, p_ttl_us bigint)
RETURNS TABLE (ord bigint, state text, holder text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
DECLARE
    n int := coalesce(array_length(p_ids, 1), 0);
    states text[] := array_fill(NULL::text, ARRAY[n]);
    holders text[] := array_fill(NULL::text, ARRAY[n]);
    item record;
    got_done boolean;
    got_holder text;
BEGIN
    IF coalesce(array_length(p_types, 1), 0) <> n THEN
        RAISE EXCEPTION 'claim_batch: % types for % ids', coalesce(array_length(p_types, 1), 0), n
            USING ERRCODE = '22023';
    END IF;
    FOR item IN
        SELECT t.id_type, t.id, t.i
        FROM unnest(p_types, p_ids) WITH ORDINALITY AS t(id_type, id, i)
        ORDER BY t.id_type, t.id, t.i
    LOOP
        FOR attempt IN 1..10 LOOP
            INSERT INTO claims AS c (prefix, queue, id_type, id, done, token, holder, expires_at)
            VALUES (p_prefix, p_queue, item.id_type, item.id, false, p_token, p_holder,
                    clock_timestamp() + make_interval(secs => p_ttl_us / 1000000.0))
            ON CONFLICT (prefix, queue, id_type, id) DO UPDATE
                SET done = false, token = excluded.token, holder = excluded.holder,
                    expires_at = excluded.expires_at
                WHERE c.expires_at <= clock_timestamp();
            IF FOUND THEN
                states[item.i] := 'claimed';
                EXIT;
            END IF;
            SELECT c.done, c.holder INTO got_done, got_holder
            FROM claims c
            WHERE c.prefix = p_prefix AND c.queue = p_queue AND c.id_type = item.id_type AND c.id = item.id
              AND c.expires_at > clock_timestamp();
            IF FOUND THEN
                states[item.i] := CASE WHEN got_done THEN 'done' ELSE 'pending' END;
                holders[item.i] := CASE WHEN got_done THEN NULL ELSE got_holder END;
                EXIT;
            END IF;
            IF attempt = 10 THEN
                RAISE EXCEPTION 'a claim changed hands ten times during one claim_batch' USING ERRCODE = '40001';
            END IF;
        END LOOP;
    END LOOP;
    RETURN QUERY SELECT i::bigint, states[i], holders[i] FROM generate_series(1, n) AS i ORDER BY i;
END
$$;

-- Settle our pending claims: p_done[i] marks claim i done for p_done_us, otherwise
-- frees it. One answer per settlement, in order: true when it was ours.
CREATE OR REPLACE FUNCTION @SCHEMA@.settle_batch(
    p_prefix text, p_queue text, p_types text[], p_ids bytea[], p_done boolean[], p_token text, p_done_us bigint)
RETURNS TABLE (ord bigint, settled boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
DECLARE
    n int := coalesce(array_length(p_ids, 1), 0);
    results boolean[] := array_fill(false, ARRAY[n]);
    item record;
BEGIN
    IF coalesce(array_length(p_types, 1), 0) <> n OR coalesce(array_length(p_done, 1), 0) <> n THEN
        RAISE EXCEPTION 'settle_batch: arrays of different lengths' USING ERRCODE = '22023';
    END IF;
    FOR item IN
        SELECT t.id_type, t.id, t.done, t.i
        FROM unnest(p_types, p_ids, p_done) WITH ORDINALITY AS t(id_type, id, done, i)
        ORDER BY t.id_type, t.id, t.i
    LOOP
        IF item.done THEN
            UPDATE claims c
            SET done = true, token = NULL,
                expires_at = clock_timestamp() + make_interval(secs => p_done_us / 1000000.0)
            WHERE c.prefix = p_prefix AND c.queue = p_queue AND c.id_type = item.id_type AND c.id = item.id
              AND NOT c.done AND c.token = p_token AND c.expires_at > clock_timestamp();
        ELSE
            DELETE FROM claims c
            WHERE c.prefix = p_prefix AND c.queue = p_queue AND c.id_type = item.id_type AND c.id = item.id
              AND NOT c.done AND c.token = p_token AND c.expires_at > clock_timestamp();
        END IF;
        results[item.i] := FOUND;
    END LOOP;
    RETURN QUERY SELECT i::bigint, results[i] FROM generate_series(1, n) AS i ORDER BY i;
END
$$;

-- The release wake-up. A peek of owner claims that registers p_instance on every
-- owner it finds held. The held rows are share-locked first (in name order), so a
-- release of one of them waits for this registration and then sees it.
CREATE OR REPLACE FUNCTION @SCHEMA@.peek_and_wait(p_prefix text, p_names text[], p_instance text, p_wait_us bigint)
RETURNS TABLE (ord bigint, holder text, remaining_us bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
DECLARE
    n int := coalesce(array_length(p_names, 1), 0);
    holders text[];
    rems bigint[];
BEGIN
    PERFORM 1 FROM leases l
    WHERE l.prefix = p_prefix AND l.kind = 'owner' AND l.name = ANY (p_names)
    ORDER BY l.name FOR SHARE;
    SELECT array_agg(CASE WHEN x.rem > 0 THEN x.holder END ORDER BY x.i),
           array_agg(CASE WHEN x.rem > 0 THEN x.rem END ORDER BY x.i)
    INTO holders, rems
    FROM (
        SELECT t.i, l.holder, micros_until(l.expires_at) AS rem
        FROM unnest(p_names) WITH ORDINALITY AS t(name, i)
        LEFT JOIN leases l
            ON l.prefix = p_prefix AND l.kind = 'owner' AND l.name = t.name AND l.token IS NOT NULL
    ) x;
    INSERT INTO waiters AS w (prefix, owner, instance, seq, expires_at)
    SELECT p_prefix, h.name, p_instance, nextval('waiter_seq'),
           clock_timestamp() + make_interval(secs => p_wait_us / 1000000.0)
    FROM (SELECT DISTINCT p_names[i] AS name FROM generate_series(1, n) AS i WHERE holders[i] IS NOT NULL) h
    ON CONFLICT (prefix, owner, instance) DO UPDATE SET seq = excluded.seq, expires_at = excluded.expires_at;
    RETURN QUERY SELECT i::bigint, holders[i], rems[i] FROM generate_series(1, n) AS i ORDER BY i;
END
$$;

-- Acquire an owner's claim; when it is held, register p_instance as a waiter, and
-- when it is taken, drop p_instance's registration. The acquire has locked the
-- lease row either way, so no release falls between the two.
CREATE OR REPLACE FUNCTION @SCHEMA@.acquire_or_wait(
    p_prefix text, p_name text, p_token text, p_holder text, p_ttl_us bigint, p_instance text, p_wait_us bigint,
    OUT acquired boolean, OUT fence bigint, OUT holder text, OUT remaining_us bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
BEGIN
    SELECT a.acquired, a.fence, a.holder, a.remaining_us
    INTO acquire_or_wait.acquired, acquire_or_wait.fence, acquire_or_wait.holder, acquire_or_wait.remaining_us
    FROM acquire(p_prefix, 'owner', p_name, p_token, p_holder, p_ttl_us) a;
    IF acquired THEN
        DELETE FROM waiters w WHERE w.prefix = p_prefix AND w.owner = p_name AND w.instance = p_instance;
    ELSE
        INSERT INTO waiters AS w (prefix, owner, instance, seq, expires_at)
        VALUES (p_prefix, p_name, p_instance, nextval('waiter_seq'),
                clock_timestamp() + make_interval(secs => p_wait_us / 1000000.0))
        ON CONFLICT (prefix, owner, instance) DO UPDATE SET seq = excluded.seq, expires_at = excluded.expires_at;
    END IF;
END
$$;

-- Release an owner's claim; when it was ours and p_wake is set, notify the oldest
-- live waiter (NOTIFY on its channel, delivered at commit) and drop its
-- registration. Lapsed registrations of the owner are dropped on the way.
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
        WHERE w.prefix = p_prefix AND w.owner = p_name AND w.expires_at <= clock_timestamp();
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

-- Expired claims and lapsed waiter registrations stay as rows until purged (lease
-- rows stay for good: they keep the fence). Deletes at most p_limit of each; the
-- expiry is checked again on the row it deletes, so a row claimed anew meanwhile
-- stays. Answers how many rows went.
CREATE OR REPLACE FUNCTION @SCHEMA@.purge_expired(p_prefix text, p_limit int) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
DECLARE
    claims_gone bigint;
    waiters_gone bigint;
BEGIN
    DELETE FROM claims c
    WHERE c.ctid IN (SELECT o.ctid FROM claims o
                     WHERE o.prefix = p_prefix AND o.expires_at <= clock_timestamp() LIMIT p_limit)
      AND c.expires_at <= clock_timestamp();
    GET DIAGNOSTICS claims_gone = ROW_COUNT;
    DELETE FROM waiters w
    WHERE w.ctid IN (SELECT o.ctid FROM waiters o
                     WHERE o.prefix = p_prefix AND o.expires_at <= clock_timestamp() LIMIT p_limit)
      AND w.expires_at <= clock_timestamp();
    GET DIAGNOSTICS waiters_gone = ROW_COUNT;
    RETURN claims_gone + waiters_gone;
END
$$;

-- Only the roles granted EXECUTE (see grant_sql) may run drain's functions.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA @SCHEMA@ FROM PUBLIC;

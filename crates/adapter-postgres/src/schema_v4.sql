-- drain's schema, version 4: drain marks. Runs after the versions before it,
-- idempotent like them. `@SCHEMA@` is replaced by the configured schema name.

-- Per owner: the token of the turn that took the claim with acquire_marked and
-- when (the server's clock), and the drain mark: when the latest turn that left
-- nothing behind took the claim. Rows stay for good, as lease rows do.
CREATE TABLE IF NOT EXISTS @SCHEMA@.drain_marks (
    prefix text NOT NULL,
    owner text NOT NULL,
    start_token text,
    started_at timestamptz,
    mark timestamptz,
    PRIMARY KEY (prefix, owner)
);

INSERT INTO @SCHEMA@.schema_version (version) VALUES (4) ON CONFLICT DO NOTHING;

-- Acquire an owner's claim (with p_instance, as acquire_or_wait: registering it when
-- held); when taken, note this token and the time as the owner's start.
CREATE OR REPLACE FUNCTION @SCHEMA@.acquire_marked(
    p_prefix text, p_name text, p_token text, p_holder text, p_ttl_us bigint, p_instance text, p_wait_us bigint,
    OUT acquired boolean, OUT fence bigint, OUT holder text, OUT remaining_us bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
BEGIN
    IF p_instance IS NULL THEN
        SELECT a.acquired, a.fence, a.holder, a.remaining_us
        INTO acquire_marked.acquired, acquire_marked.fence, acquire_marked.holder, acquire_marked.remaining_us
        FROM acquire(p_prefix, 'owner', p_name, p_token, p_holder, p_ttl_us) a;
    ELSE
        SELECT a.acquired, a.fence, a.holder, a.remaining_us
        INTO acquire_marked.acquired, acquire_marked.fence, acquire_marked.holder, acquire_marked.remaining_us
        FROM acquire_or_wait(p_prefix, p_name, p_token, p_holder, p_ttl_us, p_instance, p_wait_us) a;
    END IF;
    IF acquired THEN
        INSERT INTO drain_marks AS m (prefix, owner, start_token, started_at)
        VALUES (p_prefix, p_name, p_token, clock_timestamp())
        ON CONFLICT (prefix, owner) DO UPDATE SET start_token = excluded.start_token, started_at = excluded.started_at;
    END IF;
END
$$;

-- Release an owner's claim as release_and_wake does; when it was ours and taken by
-- acquire_marked with this token, forget the start, and with p_drained make it the
-- drain mark (a later start never gives way to an earlier one).
CREATE OR REPLACE FUNCTION @SCHEMA@.release_drained(p_prefix text, p_name text, p_token text, p_drained boolean,
    p_wake boolean, OUT released boolean, OUT woke boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
BEGIN
    SELECT r.released, r.woke INTO release_drained.released, release_drained.woke
    FROM release_and_wake(p_prefix, p_name, p_token, p_wake) r;
    IF released THEN
        UPDATE drain_marks m
        SET mark = CASE WHEN p_drained THEN greatest(m.mark, m.started_at) ELSE m.mark END,
            start_token = NULL, started_at = NULL
        WHERE m.prefix = p_prefix AND m.owner = p_name AND m.start_token = p_token;
    END IF;
END
$$;

-- Owner leases as peek_owners answers them (with p_instance, as peek_and_wait:
-- registering it on held ones), and how many microseconds ago each owner's drain
-- mark was set (NULL without one).
CREATE OR REPLACE FUNCTION @SCHEMA@.peek_marked(p_prefix text, p_names text[], p_instance text, p_wait_us bigint)
RETURNS TABLE (ord bigint, holder text, remaining_us bigint, drained_us bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
BEGIN
    IF p_instance IS NULL THEN
        RETURN QUERY
        SELECT c.ord, c.holder, c.remaining_us,
               CASE WHEN m.mark IS NOT NULL THEN greatest(0, -micros_until(m.mark)) END
        FROM peek_owners(p_prefix, p_names) c
        LEFT JOIN drain_marks m ON m.prefix = p_prefix AND m.owner = p_names[c.ord]
        ORDER BY c.ord;
    ELSE
        RETURN QUERY
        SELECT c.ord, c.holder, c.remaining_us,
               CASE WHEN m.mark IS NOT NULL THEN greatest(0, -micros_until(m.mark)) END
        FROM peek_and_wait(p_prefix, p_names, p_instance, p_wait_us) c
        LEFT JOIN drain_marks m ON m.prefix = p_prefix AND m.owner = p_names[c.ord]
        ORDER BY c.ord;
    END IF;
END
$$;

-- drain's schema, version 3: owner backlogs, the work `drain owners` drains. Runs
-- after schema_v2.sql, idempotent like it. `@SCHEMA@` is replaced by the configured
-- schema name.
--
-- An owner's items wait in backlog_items (in_flight false) until a turn takes a
-- batch (in_flight true); recording the batch deletes its rows and counts each item
-- once in backlog_processed, in the same statement. A turn that died between the
-- two leaves its batch in flight, and the owner's next turn takes that batch again:
-- no item is ever gone without being counted. The functions of one owner take a
-- transaction-scoped advisory lock on the owner, so two turns that overlap (a claim
-- that expired mid-work) see each other's batch as Redis' scripts would.

CREATE TABLE IF NOT EXISTS @SCHEMA@.backlog_items (
    prefix text NOT NULL,
    owner text NOT NULL,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    item text NOT NULL,
    in_flight boolean NOT NULL DEFAULT false,
    PRIMARY KEY (prefix, owner, seq)
);

-- item -> times recorded: a value above 1 would be an item recorded twice.
CREATE TABLE IF NOT EXISTS @SCHEMA@.backlog_processed (
    prefix text NOT NULL,
    owner text NOT NULL,
    item text NOT NULL,
    times int NOT NULL,
    PRIMARY KEY (prefix, owner, item)
);

INSERT INTO @SCHEMA@.schema_version (version) VALUES (3) ON CONFLICT DO NOTHING;

-- Append p_items[i] to the backlog of p_owners[i], in array order (one call seeds
-- every owner).
CREATE OR REPLACE FUNCTION @SCHEMA@.push_backlog(p_prefix text, p_owners text[], p_items text[]) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    IF coalesce(array_length(p_owners, 1), 0) <> coalesce(array_length(p_items, 1), 0) THEN
        RAISE EXCEPTION 'push_backlog: % owners for % items', array_length(p_owners, 1), array_length(p_items, 1)
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO backlog_items (prefix, owner, item)
    SELECT p_prefix, u.owner, u.item FROM unnest(p_owners, p_items) WITH ORDINALITY AS u(owner, item, ord)
    ORDER BY u.ord;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- The owner's next batch: the items in flight when there are any (recovered: a
-- turn failed or died before recording them), otherwise up to p_count items of the
-- backlog, oldest first, now in flight.
CREATE OR REPLACE FUNCTION @SCHEMA@.take_batch(p_prefix text, p_owner text, p_count int,
    OUT recovered boolean, OUT items text[])
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('drain backlog ' || p_prefix || ' ' || p_owner, 0));
    SELECT array_agg(b.item ORDER BY b.seq) INTO items FROM backlog_items b
    WHERE b.prefix = p_prefix AND b.owner = p_owner AND b.in_flight;
    IF items IS NOT NULL THEN
        recovered := true;
        RETURN;
    END IF;
    recovered := false;
    -- The batch's keys as an array, computed once: an IN (subquery) may run the
    -- subquery again for every row of the owner.
    WITH taken AS (
        UPDATE backlog_items b SET in_flight = true
        WHERE b.prefix = p_prefix AND b.owner = p_owner AND b.seq = ANY (ARRAY(
            SELECT o.seq FROM backlog_items o
            WHERE o.prefix = p_prefix AND o.owner = p_owner AND NOT o.in_flight
            ORDER BY o.seq LIMIT greatest(p_count, 0)))
        RETURNING b.seq, b.item
    )
    SELECT coalesce(array_agg(t.item ORDER BY t.seq), '{}') INTO items FROM taken t;
END
$$;

-- Record p_items of the owner's batch as processed: each item still in flight
-- leaves the backlog and is counted once, in the same statement; one no longer in
-- flight (another turn took the batch over and recorded it) is not counted again.
-- Returns how many items were recorded.
CREATE OR REPLACE FUNCTION @SCHEMA@.record_batch(p_prefix text, p_owner text, p_items text[]) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('drain backlog ' || p_prefix || ' ' || p_owner, 0));
    WITH gone AS (
        DELETE FROM backlog_items b
        WHERE b.prefix = p_prefix AND b.owner = p_owner AND b.in_flight AND b.item = ANY (p_items)
        RETURNING b.item
    ), counted AS (
        INSERT INTO backlog_processed AS p (prefix, owner, item, times)
        SELECT p_prefix, p_owner, g.item, count(*)::int FROM gone g GROUP BY g.item
        ON CONFLICT (prefix, owner, item) DO UPDATE SET times = p.times + excluded.times
        RETURNING 1
    )
    SELECT count(*) INTO n FROM gone;
    RETURN n;
END
$$;

-- Whether each owner of p_owners still holds items (waiting or in flight), in array
-- order: a pass over every owner asks this often, so it stops at the first row.
CREATE OR REPLACE FUNCTION @SCHEMA@.backlog_pending(p_prefix text, p_owners text[])
RETURNS TABLE (ord bigint, pending boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
    SELECT o.ord, EXISTS (SELECT 1 FROM backlog_items b WHERE b.prefix = p_prefix AND b.owner = o.name)
    FROM unnest(p_owners) WITH ORDINALITY AS o(name, ord)
    ORDER BY o.ord
$$;

-- Only the roles granted EXECUTE (see grant_sql) may run drain's functions.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA @SCHEMA@ FROM PUBLIC;

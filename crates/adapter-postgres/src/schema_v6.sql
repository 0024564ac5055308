-- drain's schema, version 6: a stamped peek of one instant. Runs after the versions
-- before it, idempotent like them. `@SCHEMA@` is replaced by the configured schema
-- name.

INSERT INTO @SCHEMA@.schema_version (version) VALUES (6) ON CONFLICT DO NOTHING;

-- peek_marked of version 4, the owners' lease rows locked first. Version 4 read the
-- drain stamps in the statement's snapshot and the claims in the later one of
-- peek_owners(): a drained release that committed in between answered a free claim
-- without its stamp. The rows stay locked until the statement ends, so no release
-- (which updates them) commits between the two reads; the statement after the lock
-- sees every release that committed before it.
CREATE OR REPLACE FUNCTION @SCHEMA@.peek_marked(p_prefix text, p_names text[], p_instance text, p_wait_us bigint)
RETURNS TABLE (ord bigint, holder text, remaining_us bigint, drained_us bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = @SCHEMA@, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM leases l
    WHERE l.prefix = p_prefix AND l.kind = 'owner' AND l.name = ANY (p_names)
    ORDER BY l.name FOR SHARE;
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

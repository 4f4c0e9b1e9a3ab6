CREATE FUNCTION outbox.ordering_lock_groups(p_groups text[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    h integer;
BEGIN
    FOR h IN SELECT DISTINCT hashtext(g) FROM unnest(p_groups) AS g WHERE g IS NOT NULL ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(1330774019, h);
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION outbox.ordering_lock_groups(p_groups text[]) FROM PUBLIC;

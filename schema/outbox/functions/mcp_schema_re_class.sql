CREATE FUNCTION outbox.mcp_schema_re_class(e text, OUT bits bit, OUT mb integer) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    ch int;
BEGIN
    IF e NOT IN ('d', 'D', 'w', 'W', 's', 'S') THEN
        RETURN;
    END IF;
    bits := repeat('0', 128)::bit(128);
    mb := 0;
    FOR ch IN 0 .. 127 LOOP
        IF (lower(e) = 'd' AND ch BETWEEN 48 AND 57)
           OR (lower(e) = 'w' AND (ch BETWEEN 48 AND 57 OR ch BETWEEN 65 AND 90 OR ch BETWEEN 97 AND 122 OR ch = 95))
           OR (lower(e) = 's' AND (ch BETWEEN 9 AND 13 OR ch = 32)) THEN
            bits := set_bit(bits, ch, 1);
        END IF;
    END LOOP;
    IF lower(e) = 's' THEN
        mb := 2;
    END IF;
    IF e IN ('D', 'W', 'S') THEN
        bits := ~bits;
        mb := CASE mb WHEN 0 THEN 1 WHEN 1 THEN 0 WHEN 2 THEN 3 WHEN 3 THEN 2 ELSE 0 END;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION outbox.mcp_schema_re_class(e text, OUT bits bit, OUT mb integer) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.mcp_schema_re_class(e text, OUT bits bit, OUT mb integer) TO outbox_admin;

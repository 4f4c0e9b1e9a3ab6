CREATE FUNCTION outbox.rate_burst(p_rate real) RETURNS double precision
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT greatest(1.0, p_rate * 0.025) $$;

REVOKE ALL ON FUNCTION outbox.rate_burst(p_rate real) FROM PUBLIC;

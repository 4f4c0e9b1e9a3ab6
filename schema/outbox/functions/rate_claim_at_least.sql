CREATE FUNCTION outbox.rate_claim_at_least(p_rate real) RETURNS double precision
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT greatest(1.0, floor(outbox.rate_burst(p_rate) / 2)) $$;

REVOKE ALL ON FUNCTION outbox.rate_claim_at_least(p_rate real) FROM PUBLIC;

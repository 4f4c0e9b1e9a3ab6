CREATE FUNCTION outbox.needs_person(p_intent bigint, p_target text, p_first_attempt_at timestamp with time zone) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    t outbox.targets;
    unkeyed text;   -- 0025
BEGIN
    SELECT * INTO t FROM outbox.targets WHERE name = p_target;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF t.status_url IS NOT NULL OR t.status_tool IS NOT NULL THEN   -- 0037: or its status tool
        IF t.enabled THEN
            RETURN NULL;   -- the relay asks the status URL (or tool)
        END IF;
        RETURN 'needs a person — the target is disabled, so its status URL is not asked: enable it, or resolve the key';
    END IF;
    IF t.key_header IS NULL THEN
        RETURN 'needs a person — no status URL, no key';
    END IF;
    unkeyed := outbox.unkeyed_attempt(p_intent);   -- 0025
    IF unkeyed = 'without' THEN
        RETURN 'needs a person — no status URL, and an attempt that may have executed went without the key';
    ELSIF unkeyed = 'not recorded' THEN
        RETURN 'needs a person — no status URL, and whether an attempt that may have executed carried the key was not recorded';
    END IF;
    IF p_first_attempt_at IS NULL THEN
        RETURN 'needs a person — no status URL, and no first attempt is recorded to tell whether the target still remembers the key';
    END IF;
    IF now() - p_first_attempt_at >= t.key_ttl THEN
        RETURN format('needs a person — no status URL, and the key is past the target''s key_ttl (%s): the target may have forgotten it',
                      t.key_ttl);
    END IF;
    RETURN format('needs a person — no status URL; the target remembers the key until %s, so a retry with it is safe until then (outbox-relay retry KEY)',
                  outbox.utc_text(p_first_attempt_at + t.key_ttl));
END
$$;

COMMENT ON FUNCTION outbox.needs_person(p_intent bigint, p_target text, p_first_attempt_at timestamp with time zone) IS 'Why only a person can settle an unknown intent ("needs a person — no status URL, no key", …), or NULL when the relay asks the target''s status URL (0023).';

REVOKE ALL ON FUNCTION outbox.needs_person(p_intent bigint, p_target text, p_first_attempt_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION outbox.needs_person(p_intent bigint, p_target text, p_first_attempt_at timestamp with time zone) TO outbox_operator;
GRANT ALL ON FUNCTION outbox.needs_person(p_intent bigint, p_target text, p_first_attempt_at timestamp with time zone) TO outbox_admin;

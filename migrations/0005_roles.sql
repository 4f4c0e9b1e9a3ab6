-- 0005: least-privilege roles (group roles: grant them to login roles).
--
--   outbox_app       the application: enqueue and read outcomes, nothing else
--                    (cannot update or delete intents, claim, or read targets' secret references)
--   outbox_relay     the relay: claim, renew, record, release; reads targets
--   outbox_operator  read-only: the stuck view, intents, attempts, targets
--   outbox_admin     operator plus decisions (approve, reject, cancel, resolve) and target registration
--
-- Roles are cluster-wide, so they are created only when missing.

DO $$
DECLARE
    role_name text;
BEGIN
    FOREACH role_name IN ARRAY ARRAY['outbox_app', 'outbox_relay', 'outbox_operator', 'outbox_admin'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', role_name);
        END IF;
    END LOOP;
END
$$;

REVOKE ALL ON SCHEMA outbox FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA outbox FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
GRANT USAGE ON SCHEMA outbox TO outbox_app, outbox_relay, outbox_operator, outbox_admin;

-- Helper functions used inside the SECURITY DEFINER ones, harmless to call.
GRANT EXECUTE ON FUNCTION outbox.canonical(jsonb), outbox.fingerprint_doc(jsonb, text[]),
                          outbox.fingerprint(jsonb, text[]), outbox.differing_fields(jsonb, jsonb),
                          outbox.visible_status(outbox.intent_state, boolean),
                          outbox.needs_approval(jsonb, jsonpath)
      TO outbox_app, outbox_relay, outbox_operator, outbox_admin;

GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz),
                          outbox.outcome(text)
      TO outbox_app, outbox_admin;

GRANT EXECUTE ON FUNCTION outbox.outcome(text),
                          outbox.relay_heartbeat(text, boolean), outbox.relay_gone(text),
                          outbox.claim(text, text[], integer[], integer, integer),
                          outbox.take_over_expired(text, integer, integer),
                          outbox.renew_leases(text, bigint[], integer),
                          outbox.record(text, bigint[], integer[], outbox.intent_state[], integer[],
                                        boolean[], outbox.attempt_class[], boolean[], integer[],
                                        text[], integer[], text[]),
                          outbox.release(text, bigint[], integer[]),
                          outbox.claim_unknown(text, integer, integer),
                          outbox.defer(text, bigint[], integer[], integer),
                          outbox.next_due_ms(),
                          outbox.live_counts()
      TO outbox_relay;
GRANT SELECT ON outbox.targets TO outbox_relay;

GRANT SELECT ON outbox.stuck, outbox.intents, outbox.attempts, outbox.targets, outbox.relays,
                outbox.mismatches
      TO outbox_operator;
GRANT EXECUTE ON FUNCTION outbox.outcome(text), outbox.live_counts() TO outbox_operator;

GRANT outbox_operator TO outbox_admin;
GRANT INSERT, UPDATE, DELETE ON outbox.targets TO outbox_admin;
GRANT EXECUTE ON FUNCTION outbox.approve(text, text), outbox.reject(text, text, text),
                          outbox.cancel(text, text), outbox.resolve(text, text, text)
      TO outbox_admin;

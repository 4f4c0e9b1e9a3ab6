-- schema/outbox/load.sql — the net schema of outbox-relay, one file per live
-- object: what a database looks like after every migration up to and
-- including 0052_sweep_apart.sql. `psql -f schema/outbox/load.sql` builds it (the files in
-- an order that works); tests/sql/schema_equivalence.sh proves it builds the
-- same schema as migrations/, tests/sql/schema_fresh_cluster.sh that it loads
-- into a fresh cluster. Read it to learn the data model; build databases with
-- migrations/ (`outbox-relay migrate`), which also records what is applied.
--
-- Why one file per object: `git log -p schema/outbox/functions/record.sql`
-- is the history of outbox.record, each change a small diff, and a new
-- migration is reviewed through the diff it makes here. Written by
-- `make schema` (tests/lib/schema-file.sh); do not edit by hand.

SET check_function_bodies = false;
SET client_min_messages = warning;

-- Roles are cluster-wide, so not part of a schema dump: created when missing, as
-- migrations 0005 and 0022 do (every role the privileges below grant to).
DO $$
DECLARE
    role_name text;
BEGIN
    FOREACH role_name IN ARRAY ARRAY['outbox_app', 'outbox_relay', 'outbox_operator', 'outbox_admin', 'outbox_mcp'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', role_name);
        END IF;
    END LOOP;
END
$$;
GRANT outbox_operator TO outbox_admin;

\ir schema.sql
\ir types/attempt_class.sql
\ir types/enqueue_result.sql
\ir types/intent_state.sql
\ir types/mcp_answer.sql
\ir tables/tombstones.sql
\ir tables/intents.sql
\ir tables/target_state.sql
\ir tables/targets.sql
\ir tables/attempts.sql
\ir tables/installation.sql
\ir tables/isolated_logins.sql
\ir tables/mcp_argument_keys.sql
\ir tables/mcp_clients.sql
\ir tables/mcp_tasks.sql
\ir tables/mcp_tools.sql
\ir tables/mismatches.sql
\ir tables/ordering_groups.sql
\ir tables/relays.sql
\ir tables/retention_epoch.sql
\ir foreign_keys.sql
\ir functions/approval_reason.sql
\ir functions/approve.sql
\ir functions/attempt_may_have_executed.sql
\ir functions/attempts_check_intent.sql
\ir functions/attempts_check_intents.sql
\ir functions/caller_may_see.sql
\ir functions/cancel.sql
\ir functions/cancel_run.sql
\ir functions/canonical.sql
\ir functions/claim.sql
\ir functions/claim_due.sql
\ir functions/claim_unknown.sql
\ir functions/compensate.sql
\ir functions/compensations.sql
\ir functions/delivery_summary.sql
\ir functions/differing_fields.sql
\ir functions/enqueue.sql
\ir functions/enqueue_any.sql
\ir functions/enqueue_remembered.sql
\ir functions/fingerprint.sql
\ir functions/fingerprint_doc.sql
\ir functions/intent_event.sql
\ir functions/intents_delete_history.sql
\ir functions/isolated.sql
\ir functions/key_hash.sql
\ir functions/links.sql
\ir functions/live_counts.sql
\ir functions/locked_intent.sql
\ir functions/mcp_answer_of.sql
\ir functions/mcp_argument_key.sql
\ir functions/mcp_call.sql
\ir functions/mcp_calls.sql
\ir functions/mcp_client.sql
\ir functions/mcp_held_by.sql
\ir functions/mcp_list_tools.sql
\ir functions/mcp_list_tools_keyed.sql
\ir functions/mcp_message.sql
\ir functions/mcp_notify_settled.sql
\ir functions/mcp_oauth_client.sql
\ir functions/mcp_outcome.sql
\ir functions/mcp_outcomes.sql
\ir functions/mcp_passthrough.sql
\ir functions/mcp_payload_ok.sql
\ir functions/mcp_schema_pattern_problem.sql
\ir functions/mcp_schema_problem.sql
\ir functions/mcp_schema_problem_at.sql
\ir functions/mcp_schema_re_char.sql
\ir functions/mcp_schema_re_class.sql
\ir functions/mcp_schema_ref.sql
\ir functions/mcp_schema_ref_loops.sql
\ir functions/mcp_schema_too_deep.sql
\ir functions/mcp_task.sql
\ir functions/mcp_task_cancel.sql
\ir functions/mcp_tasks_list.sql
\ir functions/mcp_tool.sql
\ir functions/mcp_tool_keyed.sql
\ir functions/mcp_tools_check.sql
\ir functions/mcp_tools_key_source.sql
\ir functions/mcp_tools_passthrough.sql
\ir functions/needs_approval.sql
\ir functions/needs_person.sql
\ir functions/next_due_ms.sql
\ir functions/note_decision.sql
\ir functions/notify_approved.sql
\ir functions/notify_circuit_change.sql
\ir functions/notify_relays.sql
\ir functions/notify_relays_row.sql
\ir functions/operator_session.sql
\ir functions/ordering_head_before.sql
\ir functions/ordering_lock_groups.sql
\ir functions/ordering_locked_intent.sql
\ir functions/ordering_place.sql
\ir functions/ordering_release.sql
\ir functions/ordering_turn_at_commit.sql
\ir functions/ordering_waits_for.sql
\ir functions/outcome.sql
\ir functions/outcome_any.sql
\ir functions/prunable.sql
\ir functions/prune.sql
\ir functions/prune_ids.sql
\ir functions/prune_linked.sql
\ir functions/prune_step.sql
\ir functions/prune_target.sql
\ir functions/quote_key.sql
\ir functions/rate_burst.sql
\ir functions/rate_claim_at_least.sql
\ir functions/record.sql
\ir functions/redrive.sql
\ir functions/refresh_statistics.sql
\ir functions/refuse_front_door.sql
\ir functions/refuse_key.sql
\ir functions/refuse_others_key.sql
\ir functions/refuse_traceparent.sql
\ir functions/reject.sql
\ir functions/relay_alive.sql
\ir functions/relay_gone.sql
\ir functions/relay_heartbeat.sql
\ir functions/release.sql
\ir functions/renew_leases.sql
\ir functions/resolve.sql
\ir functions/retries_due_now.sql
\ir functions/retry_now.sql
\ir functions/role_name.sql
\ir functions/rule_text.sql
\ir functions/schema_version.sql
\ir functions/settle.sql
\ir functions/take_over.sql
\ir functions/take_over_expired.sql
\ir functions/target_event.sql
\ir functions/target_gate.sql
\ir functions/targets_guard_references.sql
\ir functions/targets_state_row.sql
\ir functions/tombstone_of.sql
\ir functions/traceparent_of.sql
\ir functions/unkeyed_attempt.sql
\ir functions/utc_text.sql
\ir functions/visible_status.sql
\ir views/approvals.sql
\ir views/stuck.sql
\ir views/target_health.sql
\ir triggers/attempts_reference_insert.sql
\ir triggers/attempts_reference_update.sql
\ir triggers/intents_delete_history.sql
\ir triggers/intents_mcp_settled.sql
\ir triggers/intents_notify_approved.sql
\ir triggers/intents_notify_insert.sql
\ir triggers/intents_notify_update.sql
\ir triggers/intents_truncate_history.sql
\ir triggers/mcp_tools_check.sql
\ir triggers/mcp_tools_key_source.sql
\ir triggers/mcp_tools_passthrough.sql
\ir triggers/ordering_groups_turn.sql
\ir triggers/target_state_circuit_events.sql
\ir triggers/targets_guard_references.sql
\ir triggers/targets_state_enable.sql
\ir triggers/targets_state_insert.sql

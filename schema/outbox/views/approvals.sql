CREATE VIEW outbox.approvals AS
 SELECT i.key,
    i.target,
    (now() - i.created_at) AS age,
    i.created_at,
    i.run_id,
    outbox.rule_text(t.approval_rule) AS rule,
    outbox.approval_reason(i.payload, t.approval_rule) AS reason
   FROM (outbox.intents i
     LEFT JOIN outbox.targets t ON ((t.name = i.target)))
  WHERE (i.state = 'awaiting_approval'::outbox.intent_state);

COMMENT ON VIEW outbox.approvals IS 'Intents awaiting approval: key, target, age, the target''s rule and why it holds the intent (outbox.approval_reason: never a payload value) (0023).';

GRANT SELECT ON TABLE outbox.approvals TO outbox_operator;
GRANT SELECT ON TABLE outbox.approvals TO outbox_admin;

CREATE TYPE outbox.attempt_class AS ENUM (
    'not_sent',
    'ambiguous',
    'succeeded',
    'retry_later',
    'key_conflict',
    'permanent_failure',
    'reconciled_executed',
    'reconciled_not_executed',
    'reconcile_inconclusive',
    'resolved',
    'released'
);

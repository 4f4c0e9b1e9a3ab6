CREATE TYPE outbox.intent_state AS ENUM (
    'awaiting_approval',
    'pending',
    'in_flight',
    'succeeded',
    'failed',
    'unknown',
    'cancelled'
);
